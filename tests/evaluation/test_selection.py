"""The selection rules shared by search and eval, on tiny hand-computed inputs: the temperature's limits and the
crossing point between them, filtered majority between best-of-n and majority, majority-of-bests against a
misleading top score, ties, cut chains and unscored ones."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from prmkit.answers import canonical_answer
from prmkit.evaluation.selection import (
    RULES,
    SETTINGS,
    majority_of_bests,
    problem_seed,
    select,
    softmax_weights,
)

# One confident 5 against two lukewarm 7s.
CONFIDENT = ([0.9, 0.5, 0.5], ["5", "7", "7"], [False, False, False])


def test_every_rule_has_documented_settings_whose_defaults_it_accepts():
    assert set(RULES) == set(SETTINGS)
    for rule in RULES:
        assert select(rule, *CONFIDENT) in (0, 1)


def test_the_plain_rules_on_one_confident_answer_against_two_lukewarm_ones():
    assert select("best-of-n", *CONFIDENT) == 0
    assert select("majority", *CONFIDENT) == 1
    assert select("weighted-best-of-n", *CONFIDENT) == 1  # 0.5 + 0.5 > 0.9


@pytest.mark.parametrize("temperature, picked", [
    (0.0, 0), (0.01, 0), (0.4, 0), (0.5, 0), (0.7, 1), (10.0, 1), (math.inf, 1)])
def test_softmax_temperature_runs_from_best_of_n_to_majority(temperature, picked):
    """The 7s weigh 2 exp(-0.4 / T) against the 5's 1: they win above T = 0.4 / ln 2 = 0.577."""
    assert select("softmax-weighted", *CONFIDENT, vote_temperature=temperature) == picked


def test_softmax_weights_by_hand():
    weights = softmax_weights([0.9, 0.5, 0.5], [False] * 3, 0.4)
    assert weights == pytest.approx([1.0, math.exp(-1), math.exp(-1)])


def test_softmax_a_cut_chain_counts_below_every_whole_one():
    """The cut 0.95 counts as min(0.95, 0.2) - 1 = -0.8: at a small T the best whole chain wins, as in best-of-n,
    and at T = inf the cut chain is one vote like any other."""
    scores, answers, cut = [0.95, 0.6, 0.3, 0.2], ["5", "7", "9", "5"], [True, False, False, False]
    assert softmax_weights(scores, cut, 1.0)[0] == pytest.approx(math.exp(-0.8 - 0.6))
    assert select("softmax-weighted", scores, answers, cut, vote_temperature=0.01) == 1
    assert select("best-of-n", scores, answers, cut) == 1
    assert select("softmax-weighted", scores, answers, cut, vote_temperature=math.inf) == 3  # 5 twice


def test_softmax_unscored_chains_count_one_unit_below_the_lowest_scored():
    """Unscored 4s count as 0.8 - 1 = -0.2 against a 6 at 0.8: 2 exp(-1 / T) against 1, so 4 wins above
    T = 1 / ln 2 = 1.44, and its candidate is the first 4 (equal, unusable scores)."""
    scores, answers = [None, None, 0.8], ["4", "4", "6"]
    assert select("softmax-weighted", scores, answers, vote_temperature=0.1) == 2
    assert select("softmax-weighted", scores, answers, vote_temperature=1.0) == 2
    assert select("softmax-weighted", scores, answers, vote_temperature=3.0) == 0
    assert softmax_weights([None, None], [False, False], 0.1) == [1.0, 1.0]


@pytest.mark.parametrize("keep, picked", [(1.0, 2), (0.8, 0), (0.6, 0), (0.4, 0), (0.2, 0), (0.01, 0)])
def test_filtered_majority_by_hand(keep, picked):
    """Ranked 5, 5, 7, 7, 7: keep all and 7 wins; four kept tie 2-2 and go to the answer seen first (5); two or
    one kept are all 5."""
    assert select("filtered-majority", [0.9, 0.8, 0.2, 0.1, 0.05], ["5", "5", "7", "7", "7"],
                  keep_fraction=keep) == picked


def test_filtered_majority_votes_in_input_order_not_rank_order():
    """0.6 of 3 keeps ceil(1.8) = 2: the top two (a 3 at 0.9 and a 4 at 0.8) tie; the tie goes to the answer
    written first, the 4."""
    assert select("filtered-majority", [0.1, 0.8, 0.9], ["6", "4", "3"], keep_fraction=0.6) == 1


def test_filtered_majority_keeping_everything_is_majority():
    generator = random.Random(7)
    for _ in range(200):
        count = generator.randint(1, 9)
        scores = [generator.choice([None, math.nan, 0.1, 0.5, generator.random()]) for _ in range(count)]
        answers = [generator.choice([None, "1", "2", "3", "1.0"]) for _ in range(count)]
        cut = [generator.random() < 0.2 for _ in range(count)]
        majority = select("majority", scores, answers, cut)
        filtered = select("filtered-majority", scores, answers, cut, keep_fraction=1.0)
        assert canonical_answer(answers[filtered]) == canonical_answer(answers[majority])


# A misleading top score: one wrong 9 at 0.99, three right 42s at ~0.8, four wrong 7s at 0.3.
MISLED = ([0.99, 0.8, 0.79, 0.78, 0.3, 0.3, 0.3, 0.3], ["9", "42", "42", "42", "7", "7", "7", "7"])


def test_majority_of_bests_finds_the_mode_of_best_of_m():
    """With m = 4 of 8, best-of-4 returns 9 with probability 1 - (7/8)^4 = 0.41, 42 with (7/8)^4 - (1/2)^4 = 0.52
    and 7 with 0.06; the mode, 42, is neither best-of-n's answer (9) nor majority's (7)."""
    scores, answers = MISLED
    assert select("best-of-n", scores, answers) == 0
    assert select("majority", scores, answers) == 4
    for seed in range(5):
        assert select("majority-of-bests", scores, answers, seed=seed, mob_resamples=2000, mob_fraction=0.5) == 1


def test_majority_of_bests_with_a_perfect_prm_picks_the_right_answer():
    """Every right candidate outscores every wrong one; the lone right answer is still outvoted 5 to 1."""
    scores = [0.1, 0.2, 0.95, 0.3, 0.15, 0.25]
    answers = ["7", "7", "42", "7", "7", "7"]
    assert select("majority", scores, answers) == 0
    assert select("majority-of-bests", scores, answers, seed=3, mob_resamples=2000, mob_fraction=1.0) == 2


def test_majority_of_bests_with_resamples_of_one_is_majority():
    """m = max(1, round(0.1 * 8)) = 1: each resample's best is a uniform draw, so the mode is the majority's 7."""
    scores, answers = MISLED
    assert answers[select("majority-of-bests", scores, answers, mob_resamples=4000, mob_fraction=0.1)] == "7"


def test_majority_of_bests_is_fixed_by_its_seed_across_processes():
    """A problem's seed comes from the run's seed and the problem's key (a sha256, the same in every process);
    the bootstrap is Python's seeded Mersenne Twister."""
    assert problem_seed(0, 3) == 327711415
    scores, answers = [0.6, 0.5, 0.4, 0.3], ["1", "2", "2", "1"]
    here = [majority_of_bests(scores, answers, [False] * 4, mob_resamples=7, mob_fraction=0.5, seed=s)
            for s in range(20)]
    code = ("from prmkit.evaluation.selection import majority_of_bests as m; "
            f"print([m({scores}, {answers}, [False] * 4, mob_resamples=7, mob_fraction=0.5, seed=s) "
            "for s in range(20)])")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert there.strip() == str(here)
    assert len(set(here)) > 1  # seven resamples are few enough that seeds disagree: the seed is really used


def test_ties_go_to_the_first_candidate_and_the_first_answer():
    assert select("best-of-n", [0.5, 0.7, 0.7], ["1", "2", "3"]) == 1
    assert select("majority", [0.1, 0.9], ["3", "4"]) == 0
    assert select("weighted-best-of-n", [0.5, 0.5], ["3", "4"]) == 0
    assert select("softmax-weighted", [0.5, 0.5], ["3", "4"], vote_temperature=0.1) == 0


def test_cut_and_unscored_chains_rank_last_in_best_of_n():
    assert select("best-of-n", [0.95, 0.6], ["1", "2"], [True, False]) == 1
    assert select("best-of-n", [None, 0.1], ["1", "2"]) == 1
    assert select("best-of-n", [math.nan, 0.1, None], ["1", "2", "3"]) == 1


def test_weighted_vote_sums_scores_and_represents_an_answer_by_its_best():
    assert select("weighted-best-of-n", [0.2, 0.2, 0.9], ["7", "7", "5"]) == 2
    assert select("weighted-best-of-n", [0.1, 0.3, 0.8], ["5", "7", "5"]) == 2
    assert select("weighted-best-of-n", [None, math.nan, 0.3], ["5", "5", "7"]) == 2  # unusable scores add 0


def test_without_any_answer_the_votes_fall_back():
    scores, answers = [0.2, 0.9], [None, None]
    assert select("majority", scores, answers) == 0
    for rule in ("weighted-best-of-n", "softmax-weighted", "filtered-majority", "majority-of-bests"):
        assert select(rule, scores, answers) == 1


def test_bad_rules_and_settings_say_what_to_do():
    with pytest.raises(ValueError, match="is not known; use one of majority, best-of-n"):
        select("top-k", *CONFIDENT)
    with pytest.raises(ValueError, match="majority has no setting keep_fraction; its settings: none"):
        select("majority", *CONFIDENT, keep_fraction=0.5)
    with pytest.raises(ValueError, match="keep_fraction=0"):
        select("filtered-majority", *CONFIDENT, keep_fraction=0)
    with pytest.raises(ValueError, match="vote_temperature=-1"):
        select("softmax-weighted", *CONFIDENT, vote_temperature=-1)
    with pytest.raises(ValueError, match="one of each per candidate"):
        select("best-of-n", [0.1], ["1", "2"])
    with pytest.raises(ValueError, match="no candidates"):
        select("best-of-n", [], [])
