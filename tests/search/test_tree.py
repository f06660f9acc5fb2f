"""Beam search and DVTS step by step, with a scripted policy and a PRM that reads each step's score off its text:
beams per round, which prefixes survive pruning, ties, a policy that never writes the delimiter, empty steps,
beams that all end early, and the last round that writes to the end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from search_fakes import ScriptedPolicy, StepScorer  # noqa: E402

from prmkit.search.options import SearchOptions  # noqa: E402
from prmkit.search.tree import beam_search, dvts, shares  # noqa: E402

ROOT_SCORES = {0: 0.2, 1: 0.9, 2: 0.5, 3: 0.7}
SECOND_SCORES = {("s0.1", 0): 0.1, ("s0.1", 1): 0.65, ("s0.3", 0): 0.8, ("s0.3", 1): 0.6}


def steps_of(prefix: str) -> list[str]:
    return [s.split(" [")[0] for s in prefix.split("\n\n") if s.strip()]


def three_level(problem: str, prefix: str, k: int) -> str:
    """Round 1 from the root, round 2 below it (scores from the tables above), then an answer."""
    steps = steps_of(prefix)
    if not steps:
        return f"s0.{k} [{ROOT_SCORES[k]}]\n\nnever reached"
    if len(steps) == 1:
        return f"s1.{k} [{SECOND_SCORES.get((steps[0], k), 0.05)}]\n\nnever reached"
    return f"s2.{k}\n\nThe answer is \\boxed{{{k}}} [0.{k + 1}]"


def run(method, script, **options):
    policy, scorer = ScriptedPolicy(script), StepScorer()
    search = beam_search if method == "beam" else dvts
    results = search(policy, scorer, ["p"], SearchOptions(method=method, **options), seed=0)
    return results[0], policy, scorer


def test_beam_continues_n_beams_each_round_from_the_best_n_over_m():
    result, policy, scorer = run("beam", three_level, n=4, beam_width=2, max_rounds=3)
    assert [len(c["prompts"]) for c in policy.calls] == [4, 4, 4]
    assert [len(c) for c in scorer.calls] == [4, 4, 4]  # one score_many per round, every live prefix in it
    assert result.generated == [4, 4, 4] and result.rounds == 3
    # Round 2 continues the two best of round 1 (0.9 and 0.7), twice each, the better first.
    assert [steps_of(prefix) for _, prefix in policy.calls[1]["prompts"]] == [["s0.1"]] * 2 + [["s0.3"]] * 2
    # Round 3 continues the best two of round 2 by their last step: 0.8 (below s0.3), then 0.65 (below s0.1).
    assert [steps_of(prefix) for _, prefix in policy.calls[2]["prompts"]] == (
        [["s0.3", "s1.0"]] * 2 + [["s0.1", "s1.1"]] * 2)
    assert [c["stop"] for c in policy.calls] == [("\n\n",), ("\n\n",), ()]  # the last round writes to the end
    assert len(result.candidates) == 4 and all(c.finish_reason == "eos" for c in result.candidates)
    # Scored by the last step: two finals at 0.2 tie, and the child of the better parent comes first.
    assert [c.score for c in result.candidates] == [0.2, 0.2, 0.1, 0.1]
    assert steps_of(result.chosen.text) == ["s0.3", "s1.0", "s2.1", "The answer is \\boxed{1}"]
    assert result.chosen.step_scores == [0.7, 0.8, 0.5, 0.2] and result.chosen.answer == "1"
    assert result.tokens == policy.tokens  # every sample, pruned beams included


def test_beam_aggregate_decides_which_prefixes_survive():
    """By the last step, s0.3 > s1.0 (0.8) leads round 3; by the mean, s0.1 > s1.1 ((0.9 + 0.65) / 2) does."""
    _, by_last, _ = run("beam", three_level, n=4, beam_width=2, max_rounds=3, aggregate="last")
    _, by_mean, _ = run("beam", three_level, n=4, beam_width=2, max_rounds=3, aggregate="mean")
    assert steps_of(by_last.calls[2]["prompts"][0][1]) == ["s0.3", "s1.0"]
    assert steps_of(by_mean.calls[2]["prompts"][0][1]) == ["s0.1", "s1.1"]


def test_ties_keep_the_earlier_beams_and_repeat_exactly():
    def flat(problem, prefix, k):
        depth = len(steps_of(prefix))
        return f"d{depth}.{k}\n\nmore" if depth < 2 else f"last.{k}"

    first, policy, _ = run("beam", flat, n=4, beam_width=2, max_rounds=3)
    again, _, _ = run("beam", flat, n=4, beam_width=2, max_rounds=3)
    assert [steps_of(p) for _, p in policy.calls[1]["prompts"]] == [["d0.0"]] * 2 + [["d0.1"]] * 2
    assert first.chosen.text == again.chosen.text == "d0.0\n\nd1.0\n\nlast.0"
    assert [c.text for c in first.candidates] == [c.text for c in again.candidates]


def test_a_policy_that_never_writes_the_delimiter_gives_one_step_solutions():
    def whole(problem, prefix, k):
        return f"all in one go, attempt {k} [0.{k + 1}] so the total is 12"

    result, policy, scorer = run("beam", whole, n=4, beam_width=2, max_rounds=5)
    assert len(policy.calls) == 1  # every beam ended in round 1: nothing to continue
    assert [len(chain[1]) for chain in scorer.calls[0]] == [1, 1, 1, 1]
    assert result.chosen.steps == ["all in one go, attempt 3 [0.4] so the total is 12"]
    assert result.chosen.score == 0.4 and result.chosen.answer == "12"


def test_empty_steps_end_a_beam_and_are_never_scored():
    """An empty continuation ends its beam: it keeps the steps and score it had, and nothing empty is scored."""
    def stutters(problem, prefix, k):
        steps = steps_of(prefix)
        if not steps:
            return ("", "eos") if k == 0 else f"a{k} [0.{k}]\n\nmore"
        return ("", "eos") if steps == ["a3"] else f"b{k} [0.05]"

    result, policy, scorer = run("beam", stutters, n=4, beam_width=2, max_rounds=2)
    assert [len(call) for call in scorer.calls] == [3, 2]  # the root's empty sample and a3's are not scored
    assert all(steps for call in scorer.calls for _, steps in call)  # StepScorer also asserts this
    assert result.chosen.steps == ["a3 [0.3]"] and result.chosen.score == 0.3
    assert [c.score for c in result.candidates] == [0.3, 0.3, 0.05, 0.05]


def test_when_every_continuation_is_empty_nothing_is_scored():
    result, _, scorer = run("beam", lambda problem, prefix, k: ("", "eos"), n=4, beam_width=4)
    assert scorer.calls == [] and result.chosen.steps == [] and result.chosen.score is None
    assert result.chosen.answer is None


def test_all_beams_finishing_early_stop_the_search():
    def answers(problem, prefix, k):
        if not steps_of(prefix):
            return f"step {k} [0.5]\n\nmore"
        return f"The answer is \\boxed{{{k}}} [0.{k + 5}]\n\nand then some"

    result, policy, _ = run("beam", answers, n=4, beam_width=2, max_rounds=10)
    assert len(policy.calls) == 2 and result.rounds == 2
    assert all(c["stop"] == ("\n\n",) for c in policy.calls)
    assert result.chosen.answer == "1" and result.chosen.score == 0.6


def test_fewer_open_beams_than_kept_share_out_all_n_children():
    def mostly_done(problem, prefix, k):
        steps = steps_of(prefix)
        if not steps:
            return "open [0.3]\n\nx" if k == 2 else f"\\boxed{{{k}}} [0.1]"
        return f"next {k} [0.4]\n\nx" if len(steps) == 1 else "\\boxed{9} [0.9]"

    result, policy, _ = run("beam", mostly_done, n=4, beam_width=2, max_rounds=4)
    assert [len(c["prompts"]) for c in policy.calls] == [4, 4, 4]
    assert [steps_of(p) for _, p in policy.calls[1]["prompts"]] == [["open"]] * 4
    assert result.chosen.answer == "9"


def test_dvts_keeps_the_best_child_of_each_subtree():
    result, policy, scorer = run("dvts", three_level, n=4, beam_width=2, max_rounds=3)
    assert [len(c["prompts"]) for c in policy.calls] == [4, 4, 4]
    assert [len(c) for c in scorer.calls] == [4, 4, 4]
    # Subtree 0 drew root samples k=0,1 (0.2, 0.9), subtree 1 k=2,3 (0.5, 0.7): each keeps its own best.
    assert [steps_of(p) for _, p in policy.calls[1]["prompts"]] == [["s0.1"]] * 2 + [["s0.3"]] * 2
    assert [steps_of(p) for _, p in policy.calls[2]["prompts"]] == [["s0.1", "s1.1"]] * 2 + [["s0.3", "s1.0"]] * 2
    assert len(result.candidates) == 2  # one solution per subtree
    assert steps_of(result.chosen.text)[:3] == ["s0.1", "s1.1", "s2.1"]  # equal last scores: first subtree


def test_dvts_subtrees_end_on_their_own():
    def one_subtree_ends(problem, prefix, k):
        if not steps_of(prefix):
            return "\\boxed{1} [0.9]" if k == 0 else f"go {k} [0.{k}]\n\nx"
        return f"then \\boxed{{{k + 2}}} [0.8]"

    result, policy, _ = run("dvts", one_subtree_ends, n=4, beam_width=2, max_rounds=5)
    assert [len(c["prompts"]) for c in policy.calls] == [4, 2]  # subtree 0 ended in round 1
    assert result.chosen.answer == "1" and result.generated == [4, 2]


@pytest.mark.parametrize("total,parts,expected", [(4, 1, [4]), (4, 2, [2, 2]), (4, 3, [2, 1, 1]), (8, 2, [4, 4])])
def test_children_are_shared_out_to_the_better_parents_first(total, parts, expected):
    assert shares(total, parts) == expected
