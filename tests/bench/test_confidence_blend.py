"""bench/confidence_blend.py (the blend itself is prmkit's, tested in tests/search/test_confidence_weight.py): each
half of the problems is judged with the weight the other half chose; the PRM's scores are matched to their samples by
problem and sample number, and a file scored for other rows is refused."""

import math

import pytest

import confidence_blend as cb
from prmkit.evaluation.selection import blend_confidence


def group(key, prm, logprob, correct):
    return {"key": key, "correct": correct, "answers": [str(c) for c in correct], "truncated": [False] * len(correct),
            "scores": {cb.name_of(w): blend_confidence(prm, logprob, w) for w in cb.WEIGHTS}}


def test_each_half_is_judged_with_the_weight_the_other_half_chose():
    # even problems: the PRM orders right above wrong, the confidence the other way; odd problems: the reverse
    prm_knows = dict(prm=[0.9, 0.1], logprob=[-0.5, -0.01], correct=[True, False])
    policy_knows = dict(prm=[0.1, 0.9], logprob=[-0.01, -0.5], correct=[True, False])
    groups = cb.cross_validate([group(0, **prm_knows), group(1, **policy_knows),
                                group(2, **prm_knows), group(3, **policy_knows)])
    # the odd half orders every pair rightly from w = 10 up (log 0.1 - 0.1 > log 0.9 - 5) and ties go to the smaller
    # weight; the even half, the PRM alone
    assert [g["weight"] for g in groups] == ["w=10", cb.PRM, "w=10", cb.PRM]
    assert cb.auroc(groups, cb.CROSS) == 0.0  # each half chose what fails on the other: no leak from judged to chooser
    assert cb.auroc(groups, cb.PRM) == 0.5 and cb.auroc(groups, cb.CONFIDENCE) == 0.5


def test_scores_are_matched_to_samples_by_problem_and_sample_number():
    samples = [{"id": 7, "samples": [
        {"correct": True, "answer": "3", "finish_reason": "eos"},
        {"correct": False, "answer": None, "finish_reason": "eos"},  # no steps: not in the evaluation file
        {"correct": False, "answer": "4", "finish_reason": "length"}]}]
    eval_rows = [{"prompt": "p", "problem": 7, "sample": 0}, {"prompt": "p", "problem": 7, "sample": 2}]
    prm_rows = [{"prompt": "p", "scores": [0.9, 0.8]}, {"prompt": "p", "scores": [0.7, 0.2]}]
    logprobs = [[{"mean": -0.01}, {"mean": -0.3}, {"mean": -0.2}]]
    [g] = cb.problem_groups(samples, eval_rows, prm_rows, logprobs)
    assert g["correct"] == [True, False] and g["truncated"] == [False, True] and g["answers"] == ["3", "4"]
    assert g["scores"][cb.PRM] == [0.8, 0.2]  # the min of each chain's steps
    assert g["scores"][cb.CONFIDENCE] == pytest.approx([math.exp(-0.01), math.exp(-0.2)])
    with pytest.raises(SystemExit, match="score the PRM again"):
        cb.problem_groups(samples, eval_rows, prm_rows[:1], logprobs)
    with pytest.raises(SystemExit, match="order"):
        cb.problem_groups(samples, eval_rows, [{"prompt": "q", "scores": [0.5]}, prm_rows[1]], logprobs)
