"""The policy's confidence blended into the selection rules: score x p ** weight by hand (0 the PRM alone, inf the
policy alone), the choice it changes, the options and flags that carry it, and `prmkit search-tune` choosing it
on validation problems by within-problem AUROC."""

from __future__ import annotations

import json
import math

import pytest

from prmkit.cli import main
from prmkit.errors import PRMError
from prmkit.evaluation.selection import CONFIDENCE_WEIGHTS, blend_confidence, select
from prmkit.files import write_jsonl
from prmkit.search.options import SearchOptions
from prmkit.search.report import choose_entry
from prmkit.search.select import choose_index, from_text
from prmkit.search.tune import held_out_accuracy, read_settings, tune_selection


def test_blend_multiplies_the_score_by_the_per_token_probability_to_the_weight():
    scores, means = [0.8, 0.5, None], [-0.1, -0.02, -0.3]
    assert blend_confidence(scores, means, 0.0) == scores
    assert blend_confidence(scores, means, 10.0) == pytest.approx([0.8 * math.exp(-1.0), 0.5 * math.exp(-0.2), None])
    assert blend_confidence(scores, means, math.inf) == pytest.approx([math.exp(-0.1), math.exp(-0.02), None])
    assert blend_confidence([0.0, 0.0], [-0.1, -0.2], 1.0)[0] > blend_confidence([0.0, 0.0], [-0.1, -0.2], 1.0)[1]
    assert blend_confidence([0.5], [None], 0.0) == [0.5]  # the PRM alone needs no log-prob


@pytest.mark.parametrize("scores, means, weight, message", [
    ([0.5], [None], 1.0, "mean log-prob"),
    ([0.5], [float("nan")], math.inf, "mean log-prob"),
    ([1.7], [-0.1], 1.0, "not a probability"),
    ([0.5], [-0.1], -1.0, "use 0"),
    ([0.5, 0.4], [-0.1], 1.0, "one of each"),
])
def test_blend_refuses_what_it_cannot_blend(scores, means, weight, message):
    with pytest.raises(ValueError, match=message):
        blend_confidence(scores, means, weight)


def test_a_small_weight_breaks_the_prms_ties_and_the_prm_still_overrides_a_slightly_surer_policy():
    # samples 0 and 1 tie on the PRM; the policy was surer of 1. Sample 2: the PRM is sure, the policy a bit less so
    tied = blend_confidence([0.6, 0.6], [-0.05, -0.01], 1.0)
    assert select("best-of-n", tied, ["1", "2"]) == 1
    assert select("best-of-n", blend_confidence([0.9, 0.3], [-0.05, -0.01], 1.0), ["1", "2"]) == 0
    assert select("best-of-n", blend_confidence([0.9, 0.3], [-0.05, -0.01], 100.0), ["1", "2"]) == 1


def solution(score, logprob, tokens=10, answer="1"):
    chosen = from_text(f"step\n\nThe answer is \\boxed{{{answer}}}.", "\n\n", tokens=tokens, logprob=logprob)
    chosen.score = score
    return chosen


def test_search_choice_reads_each_solutions_mean_logprob():
    solutions = [solution(0.9, -2.0, answer="1"), solution(0.8, -0.1, answer="2")]  # mean -0.2 and -0.01
    assert solutions[0].mean_logprob == pytest.approx(-0.2)
    assert choose_index("best-of-n", solutions) == 0
    assert choose_index("best-of-n", solutions, confidence_weight=10.0) == 1
    with pytest.raises(PRMError, match="mean log-prob"):
        choose_index("best-of-n", [solution(0.9, None), solution(0.8, -0.1)], problem="p", confidence_weight=1.0)
    entries = [s.row() for s in solutions]  # as a --budgets output row holds them
    assert choose_entry("best-of-n", entries, SearchOptions(confidence_weight=10.0)) is entries[1]
    assert choose_entry("best-of-n", entries) is entries[0]


def test_options_carry_the_weight_to_the_rules_that_read_scores():
    options = SearchOptions(method="weighted-best-of-n", confidence_weight=3.0)
    assert options.selection("weighted-best-of-n") == {"confidence_weight": 3.0}
    assert options.selection("majority") == {}
    assert options.identity()["confidence_weight"] == 3.0
    assert "confidence_weight" not in SearchOptions(method="weighted-best-of-n").identity()  # older files continue
    assert "confidence_weight" not in SearchOptions(budgets=(1, 4), confidence_weight=3.0).identity()
    with pytest.raises(PRMError, match="confidence_weight=-1"):
        SearchOptions(confidence_weight=-1.0)


def test_the_cli_refuses_a_weight_without_the_policys_logprobs(tmp_path, capsys):
    data = tmp_path / "problems.jsonl"
    write_jsonl([{"prompt": "1 + 1?", "gold_answer": "2"}], data)
    code = main(["search", "no-such-run", str(data), str(tmp_path / "out.jsonl"), "--policy", "smollm2-135m",
                 "--confidence-weight", "3", "--no-logprobs"])
    assert code != 0 and "--no-logprobs" in capsys.readouterr().err


def row(prompt, samples):
    """A `--budgets` output row: (score, mean_logprob, answer, correct) per sample."""
    return {"prompt": prompt, "gold_answer": "g", "options": {"seed": 0},
            "samples": [{"score": score, "mean_logprob": mean, "answer": answer, "truncated": False,
                         "correct": right, "tokens": 10} for score, mean, answer, right in samples]}


# The PRM ranks the wrong sample first; the policy was much surer of the right one.
POLICY_KNOWS = [(0.7, -0.3, "5", False), (0.6, -0.01, "6", True)]


def test_tune_chooses_the_weight_by_within_problem_auroc_then_the_rules_at_it(tmp_path):
    validation, held_out = tmp_path / "val.jsonl", tmp_path / "test.jsonl"
    write_jsonl([row("p1", POLICY_KNOWS), row("p2", POLICY_KNOWS)], validation)
    write_jsonl([row("q1", POLICY_KNOWS)], held_out)
    tuned = tune_selection(validation, rules=("best-of-n",))
    grid = {p["confidence_weight"]: p["auroc"] for p in tuned["confidence_weight"]["grid"]}
    assert list(grid) == list(CONFIDENCE_WEIGHTS)
    # log 0.7 - 0.3 w > log 0.6 - 0.01 w until w = log(7/6) / 0.29 = 0.53: the PRM alone misorders, w = 1 on
    # order rightly, and the smallest such weight is chosen
    assert grid[0.0] == 0.0 and all(grid[w] == 1.0 for w in CONFIDENCE_WEIGHTS[1:])
    assert tuned["settings"] == {"confidence_weight": 1.0}
    assert tuned["rules"]["best-of-n"]["accuracy"] == 1.0
    held = held_out_accuracy(tuned, held_out)["rules"]["best-of-n"]
    assert held["chosen"]["accuracy"] == 1.0 and held["default"]["accuracy"] == 0.0  # default: the PRM alone
    out = tmp_path / "tuned.json"
    out.write_text(json.dumps(tuned))
    assert read_settings(out)["confidence_weight"] == 1.0


def test_tune_leaves_the_weight_out_where_a_candidate_has_no_logprob(tmp_path):
    validation = tmp_path / "val.jsonl"
    write_jsonl([row("p1", [(0.7, None, "5", False), (0.6, -0.01, "6", True)])], validation)
    tuned = tune_selection(validation, rules=("best-of-n",))
    assert "confidence_weight" not in tuned["settings"] and "mean_logprob" in tuned["confidence_weight"]["note"]
    assert tuned["rules"]["best-of-n"]["accuracy"] == 0.0
