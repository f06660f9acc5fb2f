"""Within-problem metrics of `prmkit eval`: hand-made groups worked out by hand (accuracy at each N, paired
intervals, N limited by the smallest group, one-sided problems), and a tiny PRM end to end (metrics.json, the
printed table, report.html; correctness from step labels; files with no repeated prompt say why)."""

import json

import pytest

from prmkit.evaluation.metrics import bootstrap_mean, paired_bootstrap, weighted_vote_accuracy
from prmkit.evaluation.within_problem import by_n, n_values, within_problem_metrics


def group(correct, answers, scores, truncated=None):
    return {"correct": correct, "answers": answers, "truncated": truncated or [False] * len(correct),
            "scores": {"min": scores}}


# worked out by hand in the test below
GROUPS = [group([False, True, True, False], ["1", "2", "2", "3"], [0.9, 0.2, 0.8, 0.1]),
          group([True, False, False, True], ["5", "6", "6", "5"], [0.3, 0.6, 0.7, 0.4]),
          group([False, False, False, False], ["7", "8", "7", "9"], [0.5, 0.5, 0.5, 0.5])]


def accuracies(result: dict, method: str) -> list[float]:
    return [result["methods"][method][str(n)]["accuracy"] for n in result["n"]]


def test_each_method_at_each_n_over_the_first_n_samples():
    result = by_n(GROUPS)
    assert result["n"] == [1, 2, 4] and result["problems"] == 3 and result["aggregation"] == "min"
    third = pytest.approx(1 / 3)
    # N=1: every method takes the first sample (right in problem 2 only)
    assert {m: cells["1"]["accuracy"] for m, cells in result["methods"].items()} == {
        "random": third, "oracle (pass@N)": third, "majority vote": third, "best-of-N": third,
        "weighted best-of-N": third, "softmax-weighted": third, "filtered-majority": third,
        "majority-of-bests": third}
    # N=2: the two answers tie in every problem (0.5, 0.5, 0); the PRM prefers the wrong sample in problems 1 and 2
    assert accuracies(result, "majority vote") == [third, third, pytest.approx(0.5)]
    assert accuracies(result, "best-of-N") == [third, 0.0, 0.0]
    assert accuracies(result, "oracle (pass@N)") == [third, pytest.approx(2 / 3), pytest.approx(2 / 3)]
    assert accuracies(result, "random") == [third, third, third]
    # N=4: problem 1's answer "2" sums 1.0 against "1"'s 0.9 and its best sample (0.8) is right; problem 2's "6"
    # sums 1.3 against 0.7; majority: "2" wins, "5" and "6" tie (0.5), "7" wins
    assert accuracies(result, "weighted best-of-N") == [third, 0.0, third]
    versus = result["versus_majority"]
    assert versus["best-of-N - majority vote"]["4"]["difference"] == pytest.approx((-1 - 0.5 + 0) / 3)
    assert versus["weighted best-of-N - majority vote"]["4"]["difference"] == pytest.approx(-0.5 / 3)
    assert versus["best-of-N - majority vote"]["1"] == {"difference": 0.0, "low": 0.0, "high": 0.0, "problems": 3}


def test_intervals_contain_the_estimate_are_paired_and_seeded():
    result = by_n(GROUPS)
    for cells in (*result["methods"].values(), *result["versus_majority"].values()):
        for cell in cells.values():
            value = cell.get("accuracy", cell.get("difference"))
            assert cell["low"] <= value <= cell["high"] and cell["problems"] == 3
    # paired: the difference's interval resamples problems together, so it equals the bootstrap of the differences
    best = [0.0, 0.0, 0.0]
    majority = [1.0, 0.5, 0.0]
    paired = paired_bootstrap(best, majority, iterations=2000, seed=0)
    assert result["versus_majority"]["best-of-N - majority vote"]["4"] == paired
    assert by_n(GROUPS) == result  # seeded: the same numbers every run
    assert bootstrap_mean([1, 0, 1, 1], seed=5) == bootstrap_mean([1, 0, 1, 1], seed=5)
    assert bootstrap_mean([1, 0, 1, 1])["accuracy"] == 0.75


def test_n_stops_at_the_smallest_group_and_includes_it():
    assert n_values(1) == [1] and n_values(4) == [1, 2, 4] and n_values(6) == [1, 2, 4, 6]
    three = group([True, False, False], ["1", "2", "2"], [0.1, 0.9, 0.2])
    result = by_n([*GROUPS, three])
    assert result["n"] == [1, 2, 3] and (result["smallest_group"], result["largest_group"]) == (3, 4)
    # at N=3 the four-sample problems use their first three samples: problem 1's "2" (0.2 + 0.8) beats "1" (0.9)
    assert result["methods"]["weighted best-of-N"]["3"]["accuracy"] == pytest.approx((1 + 0 + 0 + 0) / 4)


def test_within_problem_auroc_counts_one_sided_problems():
    result = within_problem_metrics(GROUPS, ["min"], correct_from="hand")
    # problem 1: right {0.2, 0.8} over wrong {0.9, 0.1} in 2 of 4 pairs; problem 2: 0 of 4; problem 3 all wrong
    assert result["auroc"]["min"] == {"auroc": 0.25, "auroc_pooled": 0.25, "problems": 2, "pairs": 8, "one_sided": 1}
    assert result["correct_from"] == "hand" and result["problems"] == 3


def test_selection_rules_are_rows_with_their_default_settings_and_compared_with_majority():
    result = by_n(GROUPS)
    assert result["rule_settings"]["softmax-weighted"] == {"vote_temperature": 0.1}
    assert result["rule_settings"]["filtered-majority"] == {"keep_fraction": 0.5}
    # filtered-majority at N=4 keeps the top two by score: problem 1 samples 0 and 2 ("1" and "2" tie, the first
    # seen wins: wrong), problem 2 samples 2 and 1 (both "6": wrong); at N=2 it keeps one, the best-ranked (wrong)
    assert accuracies(result, "filtered-majority") == [pytest.approx(1 / 3), 0.0, 0.0]
    # softmax-weighted at T=0.1, N=4: problem 1 weighs "1" 1.0 against "2" e^-7 + e^-1; problem 2 "6" 1 + e^-1
    # against "5" e^-4 + e^-3
    assert accuracies(result, "softmax-weighted") == [pytest.approx(1 / 3), 0.0, 0.0]
    assert result["versus_majority"]["filtered-majority - majority vote"]["4"]["difference"] == pytest.approx(-0.5)
    mob = accuracies(result, "majority-of-bests")
    assert mob[0] == pytest.approx(1 / 3) and all(0 <= value <= 1 for value in mob)
    # majority-of-bests is seeded per problem by its key, not by its place in the file
    keyed = [{**g, "key": f"problem {i}"} for i, g in enumerate(GROUPS)]
    assert by_n(keyed)["methods"]["majority-of-bests"] == by_n(keyed[::-1])["methods"]["majority-of-bests"]


def test_without_answers_only_the_prm_random_and_oracle_are_reported_and_the_reason_given():
    result = by_n([{**g, "answers": None} for g in GROUPS])
    assert set(result["methods"]) == {"random", "oracle (pass@N)", "best-of-N"} and result["versus_majority"] == {}
    assert "no 'answer'" in result["note"]


def test_weighted_vote_accuracy():
    # "a" sums 0.9 against "b"'s 0.5 + 0.3; its best sample is right
    assert weighted_vote_accuracy([0.9, 0.5, 0.3], ["a", "b", "b"], [True, False, False]) == 1.0
    # a tie between answers counts each half; an unscored sample adds nothing
    assert weighted_vote_accuracy([0.4, 0.4, None], ["a", "b", "b"], [True, False, True]) == 0.5
    # within the winning answer, a sample cut by max_length is not the representative
    assert weighted_vote_accuracy([0.9, 0.2, 0.5], ["a", "a", "b"], [False, True, False],
                                  truncated=[True, False, False]) == 1.0
    # no answers: best-of-N
    assert weighted_vote_accuracy([0.1, 0.7], [None, None], [False, True]) == 1.0


# end to end on a tiny PRM


def quiet(*_):
    pass


def samples(prompt: str, rows: list[tuple[str, bool, str]]) -> list[dict]:
    return [{"prompt": prompt, "completions": [text], "correct": ok, "answer": answer} for text, ok, answer in rows]


@pytest.fixture(scope="module")
def grouped_file(tmp_path_factory):
    from prmkit.files import write_jsonl

    path = tmp_path_factory.mktemp("groups") / "samples.jsonl"
    write_jsonl(samples("What is 2 + 2?", [("2 + 2 = 4.", True, "4"), ("2 + 2 = 5.", False, "5"),
                                            ("It is 4.", True, "4"), ("It is 22.", False, "22")])
                + samples("What is 3 * 3?", [("3 * 3 = 9.", True, "9"), ("3 * 3 = 6.", False, "6"),
                                             ("It is 9.", True, "9"), ("So 9.", True, "9")])
                + samples("What is 7 - 2?", [("7 - 2 = 4.", False, "4"), ("It is 9.", False, "9"),
                                             ("7 - 2 = 3.", False, "3"), ("So 4.", False, "4")]), path)
    return path


def test_eval_reports_within_problem_metrics_per_split(tiny_run, grouped_file, tmp_path, capsys):
    from prmkit.cli import main
    from prmkit.evaluation.metrics import within_problem_auroc
    from prmkit.files import read_jsonl
    from prmkit.scoring.aggregate import aggregate
    from prmkit.scoring.scorer import PRMScorer

    out = tmp_path / "eval"
    assert main(["eval", str(tiny_run), str(grouped_file), "--out", str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    split = json.loads((out / "metrics.json").read_text())["splits"]["samples"]
    within, old = split["within_problem"], split["best_of_n"]
    assert within["correct_from"] == "the rows' correct / final_answer_correct" and within["problems"] == 3
    result = within["by_n"]
    assert result["n"] == [1, 2, 4] and result["smallest_group"] == 4
    # at N = every sample, the choosers agree with the best-of-N block over whole groups
    full = {method: cells["4"]["accuracy"] for method, cells in result["methods"].items()}
    assert full["best-of-N"] == pytest.approx(old["prm"]["min"])
    assert full["majority vote"] == pytest.approx(old["majority_vote"]) == pytest.approx(2 / 3)
    assert full["random"] == pytest.approx(old["random"]) and full["oracle (pass@N)"] == pytest.approx(2 / 3)
    assert [cells["1"]["accuracy"] for cells in result["methods"].values()] == [pytest.approx(2 / 3)] * 8
    # problems 1 and 2 have right and wrong samples (2 x 2 and 3 x 1 pairs); problem 3 is all wrong
    counts = within["auroc"]["min"]
    assert (counts["problems"], counts["pairs"], counts["one_sided"]) == (2, 7, 1)
    scorer = PRMScorer.from_pretrained(str(tiny_run), device="cpu")
    rows = read_jsonl(grouped_file)
    scores = [aggregate(s, "min") for s in scorer.score_many([(r["prompt"], r["completions"]) for r in rows])]
    by_hand = within_problem_auroc([(scores[i:i + 4], [r["correct"] for r in rows[i:i + 4]]) for i in (0, 4, 8)])
    assert counts == by_hand
    assert "samples: choosing among each problem's first N samples" in printed and "N=4" in printed
    assert "best-of-N - majority vote" in printed and "within-problem AUROC" in printed
    assert "majority-of-bests - majority vote" in printed
    page = (out / "report.html").read_text()
    assert "samples: within-problem AUROC (min)" in page and "best-of-N - majority vote at N=4" in page


def test_correctness_from_labels_and_files_without_groups_say_why(tiny_run, tmp_path):
    from prmkit.evaluation.evaluate import CORRECT_FROM_LABELS, evaluate
    from prmkit.evaluation.options import EvalOptions
    from prmkit.files import write_jsonl
    from prmkit.scoring.options import ScoringOptions

    labelled = [{"prompt": "What is 2 + 3?", "completions": steps, "labels": labels}
                for steps, labels in ((["2 + 3 = 5.", "So 5."], [1, 1]), (["2 + 3 = 6.", "So 6."], [0, 0]),
                                      (["2 + 3 = 5.", "So 6."], [1, 0]))]
    write_jsonl(labelled, tmp_path / "labelled.jsonl")
    write_jsonl([{**labelled[0], "prompt": f"Problem {i}?"} for i in range(3)], tmp_path / "unique.jsonl")
    write_jsonl([{"prompt": "Same?", "completions": ["Yes."]}] * 2, tmp_path / "unlabelled.jsonl")
    splits = evaluate(tiny_run, [tmp_path / "labelled.jsonl", tmp_path / "unique.jsonl",
                                 tmp_path / "unlabelled.jsonl"], EvalOptions(out=tmp_path / "e"),
                      ScoringOptions(device="cpu"), progress=quiet).splits
    within = splits["labelled"]["within_problem"]
    assert within["correct_from"] == CORRECT_FROM_LABELS and within["by_n"]["n"] == [1, 2, 3]
    assert within["auroc"]["min"]["pairs"] == 2 and within["by_n"]["note"].startswith("majority vote")
    assert "step_label_ceiling" not in within  # the labels decide correctness here: their own score is 1 by design
    assert splits["labelled"]["best_of_n"]["oracle"] == 1.0
    assert "two or more samples" in splits["unique"]["within_problem"]["skipped"]
    assert splits["unique"]["best_of_n"] is None
    assert "no row says whether its sample is right" in splits["unlabelled"]["within_problem"]["skipped"]


def test_a_sample_without_an_answer_votes_for_nothing_and_the_vote_is_still_reported(tiny_run, tmp_path):
    from prmkit.evaluation.evaluate import evaluate
    from prmkit.evaluation.options import EvalOptions
    from prmkit.files import write_jsonl
    from prmkit.scoring.options import ScoringOptions

    rows = samples("What is 2 + 2?", [("2 + 2 = 4.", True, "4"), ("2 + 2 = 5.", False, "5"),
                                      ("It is 5.", False, "5"), ("It is 4.", True, "4")]) \
        + samples("What is 3 * 3?", [("3 * 3 = 9.", True, "9"), ("3 * 3 = 6.", False, "6"),
                                     ("It is 9.", True, "9"), ("So 3 * 3 is", False, "")])
    del rows[-1]["answer"]  # cut off before its answer, as a sample that ran out of tokens
    write_jsonl(rows, tmp_path / "cut.jsonl")
    result = evaluate(tiny_run, [tmp_path / "cut.jsonl"], EvalOptions(out=tmp_path / "e"),
                      ScoringOptions(device="cpu"), progress=quiet).splits["cut"]["within_problem"]["by_n"]
    assert "note" not in result and "best-of-N - majority vote" in result["versus_majority"]
    # problem 1: a 2-2 tie between 4 and 5 (expected 0.5); problem 2: 9 has two votes, 6 one, the cut sample none
    assert result["methods"]["majority vote"]["4"]["accuracy"] == pytest.approx(0.75)


def test_the_step_label_ceiling_counts_right_answers_reached_through_a_wrong_step():
    from prmkit.evaluation.within_problem import step_label_ceiling

    lucky = {**group([True, True, False], ["4", "4", "5"], [0.9, 0.8, 0.1]), "steps_right": [True, False, False]}
    clean = {**group([True, False], ["9", "6"], [0.5, 0.4]), "steps_right": [True, False]}
    ceiling = step_label_ceiling([lucky, clean])
    # problem 1: the clean right sample beats the wrong one, the lucky one ties it (0.75); problem 2: 1.0
    assert ceiling["auroc"] == pytest.approx((0.75 + 1.0) / 2) and ceiling["auroc_pooled"] == pytest.approx(2.5 / 3)
    assert (ceiling["right_samples"], ceiling["right_with_a_wrong_step"]) == (3, 1)
    assert step_label_ceiling([lucky, group([True, False], ["9", "6"], [0.5, 0.4])]) is None  # one group unlabelled
    assert step_label_ceiling([{**clean, "steps_right": [True, None]}]) is None


def test_eval_gives_the_step_labels_ceiling_where_answers_decide_correctness(tiny_run, tmp_path, capsys):
    from prmkit.cli import main
    from prmkit.files import write_jsonl

    rows = [{"prompt": "What is 6 + 3 - 1?", "completions": steps, "labels": labels, "correct": ok, "answer": answer}
            for steps, labels, ok, answer in (
                (["6 + 3 = 9.", "9 - 1 = 8."], [1, 1], True, "8"),
                (["6 + 3 = 10.", "10 - 1 = 8."], [0, 0], True, "8"),  # right answer, wrong steps
                (["6 + 3 = 9.", "9 - 1 = 7."], [1, 0], False, "7"),
                (["6 + 3 = 8.", "8 - 1 = 7."], [0, 0], False, "7"))]
    write_jsonl(rows, tmp_path / "lucky.jsonl")
    out = tmp_path / "eval"
    assert main(["eval", str(tiny_run), str(tmp_path / "lucky.jsonl"), "--out", str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    within = json.loads((out / "metrics.json").read_text())["splits"]["lucky"]["within_problem"]
    ceiling = within["step_label_ceiling"]
    assert ceiling["auroc"] == pytest.approx(0.75) and ceiling["pairs"] == 4
    assert (ceiling["right_samples"], ceiling["right_with_a_wrong_step"]) == (2, 1)
    assert "step labels (ceiling)" in printed
    assert "the step labels themselves, the ceiling" in (out / "report.html").read_text()
