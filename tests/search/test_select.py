"""Choosing among finished solutions: best PRM score, majority over canonical answers, PRM-weighted vote (and the
other shared rules, seeded by the problem); ties and unscored solutions; and the step that ends a beam by
committing to an answer."""

from __future__ import annotations

import pytest

from prmkit.search.select import (
    Solution,
    best_of_n,
    choose_index,
    commits_to_answer,
    from_text,
    majority_vote,
    ranking,
    weighted_vote,
)


def solution(answer: str | None, score: float | None) -> Solution:
    text = f"work\n\nThe answer is \\boxed{{{answer}}}" if answer is not None else "work, no conclusion"
    return Solution(text=text, steps=text.split("\n\n"), score=score)


def test_the_three_choosers_can_disagree():
    """One confident 5 against two lukewarm 7s: best-of-n takes the 5; the vote and the weighted vote (0.5 + 0.5
    > 0.9) take a 7."""
    pool = [solution("5", 0.9), solution("7", 0.5), solution("7", 0.5)]
    assert best_of_n(pool) == 0
    assert majority_vote(pool) == 1
    assert weighted_vote(pool) == 1


def test_weighted_vote_follows_score_mass_not_count():
    pool = [solution("7", 0.2), solution("7", 0.2), solution("5", 0.9)]
    assert majority_vote(pool) == 0
    assert weighted_vote(pool) == 2


def test_weighted_vote_represents_an_answer_by_its_best_scored_solution():
    pool = [solution("5", 0.1), solution("7", 0.3), solution("5", 0.8)]
    assert weighted_vote(pool) == 2


def test_equal_answers_in_different_spellings_vote_together():
    pool = [solution("1000", 0.3), solution("12", 0.4), solution("1,000", 0.3), solution("12.5", 0.1)]
    assert majority_vote(pool) == 0
    assert weighted_vote(pool) == 0  # 0.6 for 1000 against 0.4 for 12


def test_ties_go_to_the_first_and_unscored_rank_last():
    assert ranking([solution("1", s) for s in (0.5, None, 0.7, 0.7, None)]) == [2, 3, 0, 1, 4]
    assert best_of_n([solution("1", None), solution("2", 0.1)]) == 1
    assert majority_vote([solution("3", 0.1), solution("4", 0.9)]) == 0  # one vote each: the answer seen first
    assert weighted_vote([solution("3", 0.5), solution("4", 0.5)]) == 0


def test_a_cut_or_nan_solution_never_wins():
    """A solution whose later steps max_length cut is judged by what the PRM read: under "last" a middle step. It
    ranks below every solution read whole; a NaN score ranks last and weighs nothing in the vote."""
    whole = solution("5", None).scored([0.9, 0.8, 0.7], "last")
    cut = solution("7", None).scored([0.95, 0.9, None], "last")
    assert cut.score == 0.9 and cut.truncated and not whole.truncated and cut.row()["truncated"] is True
    assert best_of_n([cut, whole]) == 1 and ranking([cut, whole]) == [1, 0]
    broken = solution("7", None).scored([float("nan"), 0.9], "min")
    assert best_of_n([broken, whole]) == 1 and weighted_vote([broken, broken, whole]) == 2


def test_solutions_without_answers_do_not_vote():
    pool = [solution(None, 0.99), solution(None, 0.99), solution("6", 0.1)]
    assert majority_vote(pool) == 2 and weighted_vote(pool) == 2
    nothing = [solution(None, 0.2), solution(None, 0.6)]
    assert majority_vote(nothing) == 0
    assert weighted_vote(nothing) == 1  # no answer anywhere: falls back to the best score


@pytest.mark.parametrize("step,ends", [
    ("So the answer is \\boxed{12}.", True), ("#### 12", True), ("The answer is 12.", True),
    ("First, 3 * 4 = 12 apples.", False), ("We box the result: \\boxed{", False), ("", False)])
def test_a_step_ends_a_beam_only_when_it_commits_to_an_answer(step, ends):
    assert commits_to_answer(step) is ends


def test_steps_are_cut_at_the_delimiter_and_empty_pieces_dropped():
    cut = from_text("a = 1.\n\n\n\nb = 2.\n\n", "\n\n", tokens=7)
    assert cut.steps == ["a = 1.", "b = 2."] and cut.tokens == 7
    assert from_text("no delimiter at all", "\n\n").steps == ["no delimiter at all"]
    assert from_text("", "\n\n").steps == []


def test_a_sample_cut_at_max_new_tokens_votes_only_with_a_stated_answer():
    """A sample stopped by max_new_tokens mid-working has no answer, so its last number cannot win a vote."""
    cut = [Solution(text=f"7 * 2 = 14 and then we add {i}", steps=["s"], score=0.9, finish_reason="length")
           for i in (3, 3)]
    pool = [*cut, solution("17", 0.2)]
    assert [s.answer for s in pool] == [None, None, "17"]
    assert majority_vote(pool) == 2 and weighted_vote(pool) == 2
    stated = Solution(text="The answer is 17. Check: 3 +", steps=["s"], finish_reason="length")
    assert stated.answer == "17" and stated.row()["answer"] == "17"


def test_search_chooses_with_the_shared_rules_and_seeds_by_the_problem():
    """choose_index is prmkit.evaluation.selection's rule over the solutions' scores, answers and cut flags;
    majority-of-bests' resamples come from the seed and the problem's text, nothing else."""
    from prmkit.evaluation.selection import problem_seed, select

    pool = [solution("5", 0.9), solution("4", 0.5), solution("4", 0.5), solution("6", 0.1)]
    assert choose_index("softmax-weighted", pool, vote_temperature=1.0) == 1
    assert choose_index("softmax-weighted", pool, vote_temperature=0.1) == 0
    assert choose_index("greedy", pool) == 0
    picks = {problem: choose_index("majority-of-bests", pool, seed=2, problem=problem, mob_resamples=3,
                                   mob_fraction=0.25) for problem in ("a", "b", "c", "d", "e", "f")}
    assert len(set(picks.values())) > 1
    for problem, pick in picks.items():
        assert pick == select("majority-of-bests", [s.score for s in pool], [s.answer for s in pool],
                              seed=problem_seed(2, problem), mob_resamples=3, mob_fraction=0.25)
