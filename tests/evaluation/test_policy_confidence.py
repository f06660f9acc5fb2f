"""The policy's confidence (mean log-prob per token) as a chooser beside the PRM in `prmkit eval`: hand-made groups
worked out by hand (within-problem AUROC on the PRM's pairs, best-of-N by confidence at each N, the paired
differences), rows read and checked, and a tiny PRM end to end where the rows carry it and where they do not."""

import json

import pytest

from prmkit.errors import PRMError
from prmkit.evaluation.metrics import best_of_n_metrics
from prmkit.evaluation.within_problem import BEST, CONFIDENCE, MAJORITY, within_problem_metrics


def group(correct, answers, scores, confidence=None):
    found = {"correct": correct, "answers": answers, "truncated": [False] * len(correct), "scores": {"min": scores}}
    return found if confidence is None else {**found, "confidence": confidence}


# Problem 1: confidence puts both right samples above both wrong ones (4 of 4 pairs), the PRM 2 of 4.
# Problem 2: confidence wins 3 of 4 pairs (-0.9 loses to -0.3), the PRM none. Problem 3: all wrong, no pair.
GROUPS = [group([False, True, True, False], ["1", "2", "2", "3"], [0.9, 0.2, 0.8, 0.1], [-2.0, -0.5, -0.7, -1.0]),
          group([True, False, False, True], ["5", "6", "6", "5"], [0.3, 0.6, 0.7, 0.4], [-0.2, -0.3, -1.5, -0.9]),
          group([False, False, False, False], ["7", "8", "7", "9"], [0.5, 0.5, 0.5, 0.5], [-1.0, -1.0, -1.0, -1.0])]


def test_confidence_auroc_and_best_of_n_by_confidence_worked_out_by_hand():
    result = within_problem_metrics(GROUPS, ["min"], correct_from="test", iterations=200)
    confidence, prm = result["confidence_auroc"], result["auroc"]["min"]
    assert confidence == {"auroc": pytest.approx((1.0 + 0.75) / 2), "auroc_pooled": pytest.approx(7 / 8),
                          "problems": 2, "pairs": 8, "one_sided": 1}
    assert prm["auroc"] == pytest.approx((0.5 + 0.0) / 2) and prm["pairs"] == confidence["pairs"]
    methods = result["by_n"]["methods"]
    # N=1: the first samples (wrong, right, wrong); N=2 and N=4: the most confident is right in problems 1 and 2
    assert [methods[CONFIDENCE][n]["accuracy"] for n in ("1", "2", "4")] == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    versus = result["by_n"]["versus_majority"][f"{CONFIDENCE} - {MAJORITY}"]
    for n in ("1", "2", "4"):
        assert versus[n]["difference"] == pytest.approx(
            methods[CONFIDENCE][n]["accuracy"] - methods[MAJORITY][n]["accuracy"])
        assert versus[n]["low"] <= versus[n]["difference"] <= versus[n]["high"]
    prm_minus = result["by_n"]["versus_confidence"][f"{BEST} - {CONFIDENCE}"]["4"]
    assert prm_minus["difference"] == pytest.approx(methods[BEST]["4"]["accuracy"] - 2 / 3)
    assert best_of_n_metrics(GROUPS, ["min"])["policy_confidence"] == pytest.approx(2 / 3)


def test_confidence_counts_only_the_pairs_the_prm_scored():
    unscored = [group([True, False, False], ["1", "2", "3"], [0.4, None, 0.6], [-0.1, -0.5, -0.9])]
    result = within_problem_metrics(unscored, ["min"], correct_from="test", iterations=50)
    assert result["auroc"]["min"]["pairs"] == result["confidence_auroc"]["pairs"] == 1
    assert result["confidence_auroc"]["auroc"] == 1.0  # -0.1 above -0.9; the unscored -0.5 is left out


def test_without_confidence_on_every_problem_nothing_is_added_and_a_partial_file_says_why():
    plain = [{k: v for k, v in g.items() if k != "confidence"} for g in GROUPS]
    result = within_problem_metrics(plain, ["min"], correct_from="test", iterations=50)
    assert "confidence_auroc" not in result and "confidence_note" not in result
    assert CONFIDENCE not in result["by_n"]["methods"] and "versus_confidence" not in result["by_n"]
    assert not any(CONFIDENCE in name for name in result["by_n"]["versus_majority"])
    assert "policy_confidence" not in best_of_n_metrics(plain, ["min"])
    partial = within_problem_metrics([GROUPS[0], *plain[1:]], ["min"], correct_from="test", iterations=50)
    assert "confidence_auroc" not in partial and CONFIDENCE not in partial["by_n"]["methods"]
    assert partial["confidence_note"].startswith("only 1 of 3 problems have a mean_logprob on every sample")


def rows(prompt: str, samples: list[tuple[str, bool, str, float | None]]) -> list[dict]:
    return [{"prompt": prompt, "completions": [text], "correct": ok, "answer": answer,
             **({} if confidence is None else {"mean_logprob": confidence})}
            for text, ok, answer, confidence in samples]


CONFIDENT = (rows("What is 2 + 2?", [("2 + 2 = 4.", True, "4", -0.2), ("2 + 2 = 5.", False, "5", -1.2),
                                     ("It is 4.", True, "4", -0.4), ("It is 22.", False, "22", -2.0)])
             + rows("What is 3 * 3?", [("3 * 3 = 9.", True, "9", -0.1), ("3 * 3 = 6.", False, "6", -0.3),
                                       ("It is 9.", True, "9", -0.6), ("So 9.", True, "9", -0.5)]))


def evaluate_file(tiny_run, tmp_path, data: list[dict], capsys) -> tuple[dict, str, str]:
    from prmkit.cli import main
    from prmkit.files import write_jsonl

    path, out = tmp_path / "samples.jsonl", tmp_path / "eval"
    write_jsonl(data, path)
    assert main(["eval", str(tiny_run), str(path), "--out", str(out), "--device", "cpu"]) == 0
    split = json.loads((out / "metrics.json").read_text())["splits"]["samples"]
    return split, capsys.readouterr().out, (out / "report.html").read_text()


def test_eval_adds_the_policys_confidence_only_where_the_rows_carry_it(tiny_run, tmp_path, capsys):
    split, printed, page = evaluate_file(tiny_run, tmp_path / "confident", CONFIDENT, capsys)
    within = split["within_problem"]
    # problem 1: 4 of 4 pairs; problem 2: -0.6 and -0.5 lose to the wrong -0.3, -0.1 wins (1 of 3)
    assert within["confidence_auroc"]["auroc"] == pytest.approx((1.0 + 1 / 3) / 2)
    assert within["confidence_auroc"]["pairs"] == within["auroc"]["min"]["pairs"] == 7
    assert within["by_n"]["methods"][CONFIDENCE]["4"]["accuracy"] == 1.0  # -0.2 and -0.1 are both right
    assert split["best_of_n"]["policy_confidence"] == 1.0
    assert f"{CONFIDENCE} - {MAJORITY}" in printed and f"{BEST} - {CONFIDENCE}" in printed
    assert "policy confidence" in printed and "within-problem AUROC (policy confidence)" in page

    plain = [{k: v for k, v in row.items() if k != "mean_logprob"} for row in CONFIDENT]
    split, printed, page = evaluate_file(tiny_run, tmp_path / "plain", plain, capsys)
    assert "confidence_auroc" not in split["within_problem"] and "policy_confidence" not in split["best_of_n"]
    assert "confidence" not in printed and "confidence" not in page


def test_a_bad_mean_logprob_is_an_error_naming_the_row_and_field(tiny_run, tmp_path):
    from prmkit.evaluation.splits import load_split
    from prmkit.files import write_jsonl
    from prmkit.scoring.scorer import PRMScorer

    scorer = PRMScorer.from_pretrained(str(tiny_run), device="cpu")
    for bad, field in (([{**CONFIDENT[0], "mean_logprob": "high"}], "row 1, field 'mean_logprob'"),
                       ([{**CONFIDENT[0], "mean_logprob": 0.5}], "row 1, field 'mean_logprob'"),
                       ([{"prompt": "p", "candidates": ["a", "b"], "mean_logprob": [-0.1, float("nan")]}],
                        "row 1, field 'mean_logprob[1]'"),
                       ([{"prompt": "p", "candidates": ["a", "b"], "mean_logprob": [-0.1]}],
                        "row 1, field 'mean_logprob': expected a list with one entry per candidate")):
        path = tmp_path / "bad.jsonl"
        write_jsonl(bad, path)
        with pytest.raises(PRMError, match=field.replace("[", r"\[").replace("]", r"\]")):
            load_split(path, scorer)
    path = tmp_path / "candidates.jsonl"
    write_jsonl([{"prompt": "p", "candidates": ["a", "b"], "correct": [True, False], "mean_logprob": [-0.1, None]}],
                path)
    assert [c.mean_logprob for c in load_split(path, scorer).chains] == [-0.1, None]
