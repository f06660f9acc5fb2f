"""Within-problem AUROC and the paired bootstrap: hand-made groups with copies, ties, one-sided problems and
unscored candidates, each worked out by hand."""

import math

import pytest

from prmkit.evaluation.metrics import paired_bootstrap, within_problem_auroc


def test_each_problem_counts_once_and_pooled_counts_each_pair():
    groups = [([0.9, 0.1, 0.5], [True, False, False]),  # 2 pairs, both won: 1.0
              ([0.2, 0.2], [True, False]),  # a tie counts half: 0.5
              ([0.3], [True]),  # one-sided: no pair
              ([None, 0.4, 0.6], [True, False, True])]  # the unscored right candidate is left out: 1.0
    result = within_problem_auroc(groups)
    assert result["auroc"] == pytest.approx((1.0 + 0.5 + 1.0) / 3)
    assert result["auroc_pooled"] == pytest.approx((2 + 0.5 + 1) / 4)
    assert (result["problems"], result["pairs"], result["one_sided"]) == (3, 4, 1)


def test_a_problem_difficulty_signal_alone_is_chance():
    # Scores that only know the easy problem from the hard one: high everywhere on one, low on the other.
    groups = [([0.9, 0.9, 0.9, 0.9], [True, True, True, False]), ([0.1, 0.1, 0.1], [True, False, False])]
    assert within_problem_auroc(groups)["auroc"] == pytest.approx(0.5)


def test_copies_count_as_separate_candidates():
    groups = [([0.7, 0.7, 0.2], [True, True, False]), ([0.1, 0.8], [True, False])]
    result = within_problem_auroc(groups)
    assert result["auroc"] == pytest.approx(0.5) and result["auroc_pooled"] == pytest.approx(2 / 3)


def test_no_pair_anywhere_is_none_not_a_number():
    result = within_problem_auroc([([0.5, math.nan], [True, False]), ([0.1], [False])])
    assert result["auroc"] is None and result["auroc_pooled"] is None and result["one_sided"] == 2


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="2 scores for 3 candidates"):
        within_problem_auroc([([0.1, 0.2], [True, False, True])])


def test_paired_bootstrap_interval_brackets_the_mean_and_is_reproducible():
    a, b = [1, 1, 0, 1, 1, 0, 1, 1], [0, 1, 0, 0, 1, 0, 1, 0]
    result = paired_bootstrap(a, b, seed=3)
    assert result["difference"] == pytest.approx(3 / 8)
    assert 0.0 <= result["low"] <= 3 / 8 <= result["high"] <= 1.0
    assert paired_bootstrap(a, b, seed=3) == result
    same = paired_bootstrap(a, a)
    assert same["difference"] == same["low"] == same["high"] == 0.0
