"""`prmkit eval` on `prmkit search`'s output as it is, no flattening: a real search (the tiny policy through the
transformers backend, guided by the tiny PRM run) of a few problems at N=4, as a method run, as a second sampling
method of the same search, and as a --budgets run, then `prmkit eval RUN out.jsonl`. The within-problem metrics and
the policy-confidence rows appear, one group of 4 samples per problem; a file joining two methods of one search
reads their shared samples once. The tiny policy writes noise (no sample has an answer, every sample is wrong), so a
scripted policy with log-probs, searched by the same `run_search` and scored by the same tiny PRM, checks the
numbers where right and wrong samples meet."""

from __future__ import annotations

import json

import pytest

from prmkit.cli import main
from prmkit.data.synthetic import generate_records
from prmkit.evaluation.evaluate import CORRECT_FROM_FIELD
from prmkit.evaluation.metrics import within_problem_auroc
from prmkit.evaluation.within_problem import BEST, CONFIDENCE, MAJORITY
from prmkit.files import write_jsonl
from prmkit.generation.base import Sample

COMMON = ["--max-new-tokens", "12", "--device", "cpu", "--problems-per-batch", "2"]


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def evaluate(tiny_run, data: list, out, capsys) -> tuple[dict, str]:
    assert main(["eval", str(tiny_run), *map(str, data), "--out", str(out), "--device", "cpu"]) == 0
    return json.loads((out / "metrics.json").read_text())["splits"], capsys.readouterr().out


def test_eval_reads_a_real_search_output_as_it_is(tiny_run, tiny_llama, tmp_path, capsys):
    problems = tmp_path / "problems.jsonl"
    write_jsonl([{"prompt": r["prompt"], "gold_answer": r["gold_answer"]} for r in generate_records(3, seed=11)],
                problems)
    searched = {}
    for name, flags in (("bon", ["--method", "best-of-n", "--n", "4"]),
                        ("majority", ["--method", "majority", "--n", "4"]),
                        ("budgets", ["--budgets", "2,4", "--budget-methods", "best-of-n,greedy"])):
        searched[name] = tmp_path / f"{name}.jsonl"
        assert main(["search", str(tiny_run), str(problems), str(searched[name]), "--policy", str(tiny_llama),
                     *flags, *COMMON]) == 0
    capsys.readouterr()
    bon, budgets = read(searched["bon"]), read(searched["budgets"])
    assert [len(r["candidates"]) for r in bon] == [4, 4, 4] and [len(r["samples"]) for r in budgets] == [4, 4, 4]
    assert all(c["correct"] is not None and c["mean_logprob"] < 0 for r in bon for c in r["candidates"])

    splits, printed = evaluate(tiny_run, [searched["bon"], searched["budgets"]], tmp_path / "eval", capsys)
    for name in ("bon", "budgets"):
        split = splits[name]
        assert split["rows"] == 12  # 3 problems x 4 samples; the budgets row's greedy solution is not one of them
        within = split["within_problem"]
        assert within["problems"] == 3 and within["correct_from"] == CORRECT_FROM_FIELD
        assert within["by_n"]["n"] == [1, 2, 4] and within["by_n"]["smallest_group"] == 4
        assert CONFIDENCE in within["by_n"]["methods"] and "confidence_auroc" in within
        assert f"{BEST} - {CONFIDENCE}" in within["by_n"]["versus_confidence"]
        assert "policy_confidence" in split["best_of_n"]
    assert CONFIDENCE in printed and f"{BEST} - {CONFIDENCE}" in printed

    # Two sampling methods of one search share their samples: joined in one file, each is read once.
    joined = tmp_path / "joined.jsonl"
    joined.write_text(searched["bon"].read_text() + searched["majority"].read_text())
    assert [r["candidates"] for r in read(searched["majority"])] == [r["candidates"] for r in bon]
    splits, printed = evaluate(tiny_run, [joined], tmp_path / "eval-joined", capsys)
    assert splits["joined"]["rows"] == 12 and splits["joined"]["within_problem"]["problems"] == 3
    assert "3 `prmkit search` row(s) (4, 5, 6) hold the same samples" in printed

    beam = tmp_path / "beam.jsonl"
    assert main(["search", str(tiny_run), str(problems), str(beam), "--policy", str(tiny_llama), "--method", "beam",
                 "--n", "4", "--beam-width", "2", "--max-rounds", "2", *COMMON]) == 0
    capsys.readouterr()
    assert main(["eval", str(tiny_run), str(beam), "--out", str(tmp_path / "eval-beam"), "--device", "cpu"]) == 2
    assert "beam.jsonl: row 1: a `prmkit search --method beam` row" in " ".join(capsys.readouterr().err.split())


ANSWERS = {"What is 2 + 2?": [("2 + 2 = 4.\n\nThe answer is 4.", -2.0), ("2 + 2 = 5.\n\nThe answer is 5.", -6.0),
                              ("It is 4.\n\nThe answer is 4.", -4.0), ("So 22.\n\nThe answer is 22.", -9.0)],
           "What is 3 * 3?": [("3 * 3 = 6.\n\nThe answer is 6.", -1.0), ("3 * 3 = 9.\n\nThe answer is 9.", -5.0),
                              ("Nine.\n\nThe answer is 9.", -3.0), ("3 + 3 = 6.\n\nThe answer is 6.", -8.0)]}


class ConfidentPolicy:
    """A policy whose samples and log-probs are written down (problem -> [(text, logprob)]), one per sample."""

    name = "fake:confident"

    def prompt(self, problem: str, prefix: str = "") -> str:
        return problem

    def generate(self, prompts, n=1, **_) -> list[list[Sample]]:
        return [[Sample(text, len(text.split()) + 1, "eos", logprob=logprob) for text, logprob in ANSWERS[p][:n]]
                for p in prompts]


def test_eval_on_a_search_whose_samples_are_right_and_wrong(tiny_run, tmp_path, capsys):
    from prmkit.scoring.scorer import PRMScorer
    from prmkit.search.options import SearchOptions
    from prmkit.search.run import run_search

    problems, out = tmp_path / "problems.jsonl", tmp_path / "search.jsonl"
    write_jsonl([{"prompt": "What is 2 + 2?", "gold_answer": "4"}, {"prompt": "What is 3 * 3?", "gold_answer": "9"}],
                problems)
    run_search(PRMScorer.from_pretrained(str(tiny_run), device="cpu"), ConfidentPolicy(), problems, out,
               SearchOptions(method="best-of-n", n=4))
    rows = read(out)
    assert [[c["correct"] for c in r["candidates"]] for r in rows] == [[True, False, True, False],
                                                                       [False, True, True, False]]
    splits, printed = evaluate(tiny_run, [out], tmp_path / "eval", capsys)
    within = splits["search"]["within_problem"]
    expected = within_problem_auroc([([c["mean_logprob"] for c in r["candidates"]],
                                      [c["correct"] for c in r["candidates"]]) for r in rows])
    assert within["confidence_auroc"]["auroc"] == pytest.approx(expected["auroc"])
    assert within["confidence_auroc"]["pairs"] == within["auroc"]["min"]["pairs"] == 8
    # the most confident sample: right in problem 1 (-2/9 of "2 + 2 = 4. ..."), wrong in problem 2 (-1/9)
    assert within["by_n"]["methods"][CONFIDENCE]["4"]["accuracy"] == pytest.approx(0.5)
    assert within["by_n"]["methods"][MAJORITY]["4"]["accuracy"] == pytest.approx(0.75)  # a tie in problem 2
    assert f"{CONFIDENCE} - {MAJORITY}" in printed and f"{BEST} - {CONFIDENCE}" in printed
