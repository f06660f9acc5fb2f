"""PRMBench's PRMScore on hand-made chains, every expected value worked out by hand below the chains."""

from __future__ import annotations

import pytest

from prmkit.evaluation.prmbench import count_steps, f1_score, prmbench_metrics, prmscore


def f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall)


# A step passes when its score is > 0.5 (strictly: 0.5 itself is flagged).
CHAINS = [
    # circular: 0.9, 0.7 correct+pass; 0.6 wrong+pass; 0.2 wrong+flag; 0.5, 0.4 correct+flag
    ("circular", [0.9, 0.7, 0.6, 0.2, 0.5, 0.4], [1, 1, 0, 0, 1, 1]),
    # circular: 0.8 correct+pass; an unscored wrong step (cut by max_length); 0.1 wrong+flag; an unlabelled step
    ("circular", [0.8, None, 0.1, 0.9], [1, 0, 0, None]),
    # confidence: 0.2 correct+flag; 0.9 wrong+pass; 0.1 wrong+flag
    ("confidence", [0.2, 0.9, 0.1], [1, 0, 0]),
    # multi_solutions: every step correct; 0.9, 0.7 pass, 0.3 flagged
    ("multi_solutions", [0.9, 0.3, 0.7], [1.0, 1.0, 1.0]),
]


def metrics(threshold: float = 0.5) -> dict:
    return prmbench_metrics(*zip(*CHAINS), threshold=threshold)


def test_per_class_scores_match_the_hand_computation():
    classes = metrics()["classes"]
    assert list(classes) == ["circular", "confidence", "multi_solutions"]  # the leaderboard's order

    # circular: correct passed 3, correct flagged 2, wrong passed 1, wrong flagged 2
    circular = classes["circular"]
    assert (circular["correct_passed"], circular["correct_flagged"]) == (3, 2)
    assert (circular["wrong_passed"], circular["wrong_flagged"]) == (1, 2)
    assert (circular["chains"], circular["correct_steps"], circular["wrong_steps"]) == (2, 5, 3)
    assert circular["steps_unscored"] == 1
    f1_correct = f1(3 / (3 + 1), 3 / (3 + 2))  # precision 3 of 4 passed, recall 3 of 5 correct
    f1_wrong = f1(2 / (2 + 2), 2 / (2 + 1))  # precision 2 of 4 flagged, recall 2 of 3 wrong
    assert circular["f1_correct"] == pytest.approx(f1_correct) == pytest.approx(2 / 3)
    assert circular["f1_wrong"] == pytest.approx(f1_wrong) == pytest.approx(4 / 7)
    assert circular["prmscore"] == pytest.approx(0.5 * 2 / 3 + 0.5 * 4 / 7)

    # confidence: no correct step passes, so F1(correct) is 0 (PRMBench's script would print -1 here)
    confidence = classes["confidence"]
    assert confidence["f1_correct"] == 0.0
    assert confidence["f1_wrong"] == pytest.approx(f1(1 / (1 + 1), 1 / (1 + 1)))  # = 0.5
    assert confidence["prmscore"] == pytest.approx(0.5 * 0.0 + 0.5 * 0.5)

    # multi_solutions has no wrong step: F1(wrong) is undefined and PRMScore is F1(correct), as the leaderboard
    multi = classes["multi_solutions"]
    assert multi["f1_correct"] == pytest.approx(f1(2 / 2, 2 / 3)) == pytest.approx(0.8)
    assert multi["f1_wrong"] is None and multi["wrong_steps"] == 0
    assert multi["prmscore"] == pytest.approx(0.8)


def test_overall_sums_the_counts_of_every_class_before_the_f1():
    overall = metrics()["overall"]
    # correct passed 3+0+2 = 5, correct flagged 2+1+1 = 4, wrong passed 1+1+0 = 2, wrong flagged 2+1+0 = 3
    assert (overall["correct_passed"], overall["correct_flagged"]) == (5, 4)
    assert (overall["wrong_passed"], overall["wrong_flagged"]) == (2, 3)
    assert (overall["chains"], overall["steps_unscored"]) == (4, 1)
    f1_correct = f1(5 / (5 + 2), 5 / (5 + 4))  # = 10 / 16
    f1_wrong = f1(3 / (3 + 4), 3 / (3 + 2))  # = 6 / 12
    assert overall["f1_correct"] == pytest.approx(f1_correct) == pytest.approx(0.625)
    assert overall["f1_wrong"] == pytest.approx(f1_wrong) == pytest.approx(0.5)
    assert overall["prmscore"] == pytest.approx(0.5 * 0.625 + 0.5 * 0.5)
    # micro, not the mean of the classes' scores
    assert overall["prmscore"] != pytest.approx(sum(c["prmscore"] for c in metrics()["classes"].values()) / 3)


def test_the_threshold_is_strict_and_can_be_moved():
    assert metrics()["threshold"] == 0.5
    # at 0.45 the circular 0.5 step passes: correct passed 4, flagged 1; wrong passed 1, flagged 2
    circular = metrics(0.45)["classes"]["circular"]
    assert (circular["correct_passed"], circular["correct_flagged"]) == (4, 1)
    assert circular["f1_correct"] == pytest.approx(f1(4 / (4 + 1), 4 / (4 + 1)))
    assert circular["f1_wrong"] == pytest.approx(f1(2 / (2 + 1), 2 / (2 + 1)))
    assert count_steps([0.5], [1], 0.5).correct_flagged == 1
    assert count_steps([0.5000001], [1], 0.5).correct_passed == 1


def test_dimensions_are_means_of_their_classes_when_all_are_present():
    assert metrics()["dimensions"] == {"simplicity": None, "soundness": None, "sensitivity": None}
    chains = [("redundency", [0.9, 0.2], [1, 0]),  # both right: PRMScore 1
              ("circular", [0.9, 0.9], [1, 0])]  # F1 correct f1(1/2, 1/1), F1 wrong 0 (the wrong step passes)
    result = prmbench_metrics(*zip(*chains))
    assert result["classes"]["circular"]["prmscore"] == pytest.approx(0.5 * f1(1 / 2, 1) + 0.5 * 0.0)
    assert result["dimensions"]["simplicity"] == pytest.approx((1.0 + 0.5 * (2 / 3)) / 2)
    assert result["dimensions"]["soundness"] is None


def test_unknown_classes_follow_the_leaderboard_ones_and_bad_input_raises():
    result = prmbench_metrics(["zeta", "alpha", "deception"], [[0.9], [0.9], [0.1]], [[1], [1], [0]])
    assert list(result["classes"]) == ["deception", "alpha", "zeta"]
    # deception: its one wrong step is flagged and nothing else is there
    assert result["classes"]["deception"]["f1_correct"] is None and result["classes"]["deception"]["prmscore"] == 1
    with pytest.raises(ValueError, match="2 scores for 1 step labels"):
        prmbench_metrics(["circular"], [[0.1, 0.2]], [[1]])
    with pytest.raises(ValueError, match="one of each per chain"):
        prmbench_metrics(["circular", "circular"], [[0.1]], [[1]])


def test_building_blocks():
    assert f1_score(0, 0, 0) is None and f1_score(0, 3, 0) is None  # nothing to find
    assert f1_score(0, 0, 2) == 0.0 and f1_score(2, 1, 1) == pytest.approx(f1(2 / 3, 2 / 3))
    # the leaderboard's arithmetic: ReasonEval-7B overall F1 90.8 and negative F1 29.2 give PRMScore 60.0
    assert prmscore(0.908, 0.292) == pytest.approx(0.600)
    assert prmscore(0.995, None) == 0.995 and prmscore(None, None) is None


# ---------------------------------------------------------------- prmkit eval on PRMBench files

def test_eval_reports_prmscore_for_converted_and_raw_prmbench_files(tiny_run, tmp_path):
    import json
    from pathlib import Path

    from prmkit.data.convert import convert
    from prmkit.evaluation.evaluate import evaluate
    from prmkit.evaluation.options import EvalOptions
    from prmkit.evaluation.tables import render_tables
    from prmkit.scoring.options import ScoringOptions
    from prmkit.scoring.scorer import PRMScorer

    raw = Path(__file__).parents[1] / "fixtures" / "formats" / "prmbench.jsonl"
    converted = tmp_path / "converted.jsonl"
    convert("prmbench", raw, converted)
    options = ScoringOptions(device="cpu")
    result = evaluate(tiny_run, [converted, raw], EvalOptions(out=tmp_path / "eval"), options,
                      progress=lambda *_: None)
    written = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    bench = written["splits"]["converted"]["prmbench"]
    assert set(bench) == {"threshold", "overall", "classes", "dimensions"}
    assert list(bench["classes"]) == ["redundency", "circular", "confidence", "multi_solutions"]
    assert {"prmscore", "f1_correct", "f1_wrong", "chains", "correct_steps", "wrong_steps", "correct_passed",
            "correct_flagged", "wrong_passed", "wrong_flagged", "steps_unscored"} == set(bench["overall"])
    overall = bench["overall"]
    # 15 labelled steps (10 correct, 5 wrong); the tiny run's max_length cuts the longest chains' last steps
    assert overall["chains"] == 4
    assert overall["correct_steps"] + overall["wrong_steps"] + overall["steps_unscored"] == 15
    assert overall["steps_unscored"] == written["splits"]["converted"]["steps_unscored"]
    assert bench["threshold"] == 0.5
    # the raw file is converted on the fly into the same chains
    assert written["splits"]["prmbench"]["prmbench"] == bench

    # the same numbers from the pure function on scores taken independently
    records = [json.loads(line) for line in converted.read_text(encoding="utf-8").splitlines()]
    scores = PRMScorer.from_options(tiny_run, options).score_many([(r["prompt"], r["completions"]) for r in records])
    expected = prmbench_metrics([r["prmbench_class"] for r in records], scores, [r["labels"] for r in records])
    assert bench["overall"]["prmscore"] == pytest.approx(expected["overall"]["prmscore"])
    for name, values in expected["classes"].items():
        for key, value in values.items():
            assert bench["classes"][name][key] == pytest.approx(value), (name, key)

    titles = [str(table.title) for table in render_tables(result)]
    assert any(title.startswith("PRMBench converted: PRMScore") for title in titles)
