"""The metric maths on small hand-computed examples: step metrics, calibration, ProcessBench, best-of-N."""

import itertools
import random

import pytest

from prmkit.evaluation.metrics import (
    auroc,
    best_of_n_metrics,
    choice_accuracy,
    expected_calibration_error,
    majority_accuracy,
    precision_recall_f1,
    random_accuracy,
    reliability_bins,
    roc_curve,
    step_metrics,
)
from prmkit.evaluation.processbench import (
    average_f1,
    calibrate_threshold,
    evaluate_threshold,
    first_error_from_labels,
    predict_first_error,
    processbench_f1,
)


def test_auroc_and_roc_curve():
    scores, labels = [0.9, 0.8, 0.8, 0.3], [True, False, True, False]
    # positives 0.9, 0.8; negatives 0.8, 0.3: pairs (0.9>0.8, 0.9>0.3, 0.8=0.8 half, 0.8>0.3) -> 3.5 / 4
    assert auroc(scores, labels) == pytest.approx(0.875)
    assert auroc([0.1, 0.2], [True, True]) is None
    fpr, tpr = roc_curve(scores, labels)
    # thresholds 0.9, 0.8 (both 0.8s pass together), 0.3
    assert fpr == [0.0, 0.0, 0.5, 1.0] and tpr == [0.0, 0.5, 1.0, 1.0]


def test_precision_recall_f1():
    result = precision_recall_f1([True, True, False, False], [True, False, True, False])
    assert result == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert precision_recall_f1([False, False], [True, False])["precision"] is None


def test_expected_calibration_error():
    scores, labels = [0.05, 0.15, 0.95, 0.95], [0, 1, 1, 1]
    # bins: [0,.1): |0-.05| * 1/4; [.1,.2): |1-.15| * 1/4; [.9,1]: |1-.95| * 2/4
    assert expected_calibration_error(scores, labels) == pytest.approx(0.0125 + 0.2125 + 0.025)
    bins = reliability_bins([1.0, 0.0], [1, 0])
    assert bins[-1]["count"] == 1 and bins[0]["count"] == 1  # a score of exactly 1.0 lands in the last bin
    assert expected_calibration_error([], []) is None


def test_step_metrics_keys_and_values():
    metrics = step_metrics([0.9, 0.6, 0.4, 0.2], [1, 0, 1, 0], threshold=0.5)
    assert metrics["n_steps"] == 4 and metrics["accuracy"] == 0.5 and metrics["positive_rate"] == 0.5
    assert metrics["mse"] == pytest.approx((0.01 + 0.36 + 0.36 + 0.04) / 4)
    # passed: 0.9 (right), 0.6 (wrong) -> precision 0.5; flagged: 0.4 (wrong), 0.2 (right) -> error precision 0.5
    assert metrics["precision"] == 0.5 and metrics["recall"] == 0.5 and metrics["error_f1"] == 0.5
    assert metrics["auroc"] == pytest.approx(0.75) and metrics["ece"] is not None
    assert step_metrics([], [])["accuracy"] is None


def test_first_error_helpers():
    assert first_error_from_labels([1.0, None, 0.0, 0.0]) == 2
    assert first_error_from_labels([1, 1, None]) == -1
    assert predict_first_error([0.9, None, 0.4, 0.1], 0.5) == 2
    assert predict_first_error([0.9, 0.5], 0.5) == -1  # "below": a score equal to the threshold passes


# Split A: each chain is right for thresholds in an interval: (0.2, 0.9], (-inf, 0.6], (0.4, inf), (-inf, 0.5];
# only (0.4, 0.5] satisfies all four, so calibration finds F1 = 1 at the midpoint 0.45.
SPLIT_A = ([[0.9, 0.2, 0.8], [0.9, 0.7, 0.6], [0.4, 0.9], [0.8, 0.5]], [1, -1, 0, -1])
# Split B at 0.45: predictions 0 (gold 1, miss), 2 (gold 2, hit), -1 (gold -1, hit), 0 (gold -1, miss),
# 2 (gold 2, hit: the unscored step is skipped) -> error accuracy 2/3, correct accuracy 1/2, F1 = 4/7.
SPLIT_B = ([[0.3, 0.9], [0.9, 0.5, 0.1], [0.6, 0.46], [0.44], [0.9, None, 0.2]], [1, 2, -1, -1, 2])


def test_processbench_f1_by_hand():
    result = processbench_f1([0, 2, -1, 0, 2], [1, 2, -1, -1, 2])
    assert result["error_accuracy"] == pytest.approx(2 / 3) and result["correct_accuracy"] == 0.5
    assert result["f1"] == pytest.approx(4 / 7) and (result["n_error"], result["n_correct"]) == (3, 2)
    only_errors = processbench_f1([0], [0])
    assert only_errors["correct_accuracy"] is None and only_errors["f1"] is None


def test_threshold_calibrated_on_one_split_applies_to_another():
    calibrated = calibrate_threshold(*SPLIT_A)
    assert calibrated["threshold"] == pytest.approx(0.45) and calibrated["f1"] == 1.0
    applied = evaluate_threshold(*SPLIT_B, calibrated["threshold"])
    assert applied["f1"] == pytest.approx(4 / 7)
    assert average_f1({"a": calibrated, "b": applied}) == pytest.approx((1 + 4 / 7) / 2)
    assert average_f1({"a": calibrated, "b": {"f1": None}}) is None


def test_calibration_is_exact_against_brute_force():
    rng = random.Random(0)
    for _ in range(20):
        chains = [[round(rng.random(), 2) if rng.random() > 0.1 else None for _ in range(rng.randint(1, 5))]
                  for _ in range(12)]
        gold = [rng.choice([-1] + [i for i, s in enumerate(c) if s is not None]) for c in chains]
        found = calibrate_threshold(chains, gold)
        grid = sorted({s for c in chains for s in c if s is not None})
        tries = [t + d for t in grid for d in (-1e-4, 0.0, 1e-4)]
        best = max((evaluate_threshold(chains, gold, t)["f1"] or 0.0) for t in tries)
        assert found["f1"] == pytest.approx(best)


def test_choice_accuracy_ties_and_missing_scores():
    assert choice_accuracy([0.2, 0.9, 0.5], [False, True, False]) == 1.0
    # a tie between a right and a wrong candidate: expected accuracy of a random tie-break
    assert choice_accuracy([0.9, 0.9, 0.1], [True, False, True]) == 0.5
    # an unscored candidate is never picked, even when it is the only correct one
    assert choice_accuracy([None, 0.3], [True, False]) == 0.0
    assert choice_accuracy([None, None], [True, False]) == 0.5  # nothing scored: random pick


def test_choice_accuracy_never_picks_a_cut_or_nan_candidate_over_a_whole_one():
    # the cut candidate (higher by what was read) is wrong; the whole one is right
    assert choice_accuracy([0.95, 0.7], [False, True], truncated=[True, False]) == 1.0
    assert choice_accuracy([0.95, 0.7], [False, True], truncated=[True, True]) == 0.0  # all cut: by score
    for order in ([float("nan"), 0.3], [0.3, float("nan")]):
        assert choice_accuracy(order, [s == 0.3 for s in order]) == 1.0  # the NaN one is the wrong one
    assert random_accuracy([True, False, False, True]) == 0.5


def test_majority_vote():
    assert majority_accuracy(["4", "4", "5"], [True, True, False]) == 1.0
    assert majority_accuracy(["4", "5", "6", "6", "5"], [True, False, True, True, False]) == 0.5  # 6 vs 5 tie


def test_majority_vote_groups_spellings_of_one_answer():
    # compared as raw strings, "1,000" and "1000" split their vote and "999" ties them
    assert majority_accuracy(["1,000", "1000", "999", "999", "1000.0"], [True, True, False, False, True]) == 1.0
    assert majority_accuracy(["\\frac12", "\\dfrac{1}{2}", "0.3"], [True, True, False]) == 1.0
    assert majority_accuracy([None, None], [True, False]) == 0.5  # no answer at all: a random pick


def test_best_of_n_metrics():
    groups = [
        {"correct": [True, False, False], "answers": ["1", "2", "2"],
         "scores": {"min": [0.9, 0.1, 0.2], "mean": [0.1, 0.9, None]}},
        {"correct": [False, True], "answers": ["7", "8"], "scores": {"min": [0.5, 0.5], "mean": [0.2, 0.3]}},
    ]
    result = best_of_n_metrics(groups, ["min", "mean"])
    assert result["n_problems"] == 2 and result["mean_candidates"] == 2.5
    assert result["random"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert result["majority_vote"] == pytest.approx((0 + 0.5) / 2)
    assert result["prm"] == {"min": pytest.approx((1 + 0.5) / 2), "mean": pytest.approx((0 + 1) / 2)}
    assert result["oracle"] == 1.0
    no_answers = best_of_n_metrics([{**groups[0], "answers": None}], ["min"])
    assert no_answers["majority_vote"] is None and "answer" in no_answers["note"]


def test_pick_is_independent_of_candidate_order():
    scores, correct = [0.3, 0.7, 0.7, 0.1], [False, True, False, True]
    for order in itertools.permutations(range(4)):
        assert choice_accuracy([scores[i] for i in order], [correct[i] for i in order]) == 0.5
