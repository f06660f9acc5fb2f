"""SearchOptions: every problem of a setting reported at once, in the flags' words, and budget parsing."""

from __future__ import annotations

import pytest

from prmkit.data.problems import derive_seed
from prmkit.errors import PRMError
from prmkit.search.options import SearchOptions, parse_budgets


def test_bad_settings_are_reported_together():
    with pytest.raises(PRMError) as err:
        SearchOptions(method="tree", n=0, temperature=-1, delimiter="", aggregate="median", max_rounds=0)
    message = str(err.value)
    for part in ("method='tree'", "n=0", "temperature=-1", "delimiter is empty", "aggregate='median'",
                 "max_rounds=0"):
        assert part in message


def test_beam_needs_whole_beams_per_kept_beam():
    with pytest.raises(PRMError, match="n=6 is not a multiple of beam_width=4.*--n 4"):
        SearchOptions(method="beam", n=6)
    assert SearchOptions(method="best-of-n", n=6).n == 6  # only the tree methods keep n / beam_width beams


def test_budgets_are_sorted_and_tree_methods_need_a_multiple_of_the_width():
    options = SearchOptions(budgets=(8, 2, 4, 2), beam_width=4)
    assert options.budgets == (2, 4, 8) and options.tree_budgets() == (4, 8)
    with pytest.raises(PRMError, match="no budget in 1,2 is a multiple of beam_width=4"):
        SearchOptions(budgets=(1, 2))
    assert SearchOptions(budgets=(1, 2), budget_methods=("greedy", "best-of-n")).tree_budgets() == ()
    with pytest.raises(PRMError, match="budget_methods=best,beam"):
        SearchOptions(budgets=(4,), budget_methods=("best", "beam"))


def test_budget_flags_parse_or_say_how():
    assert parse_budgets("1,2, 4,8") == (1, 2, 4, 8)
    with pytest.raises(PRMError, match="--budgets 'a,b'.*e.g. --budgets 1,2,4,8"):
        parse_budgets("a,b")


def test_identity_leaves_out_what_does_not_change_results():
    identity = SearchOptions(limit=3, overwrite=True).identity()
    assert "limit" not in identity and "overwrite" not in identity and "budget_methods" not in identity
    assert identity["n"] == 4 and identity["delimiter"] == "\n\n"


def test_derived_seeds_differ_by_part_and_repeat():
    assert derive_seed(0, "beam", 1) == derive_seed(0, "beam", 1) != derive_seed(0, "beam", 2)
    assert derive_seed(0, "beam", 1) != derive_seed(1, "beam", 1)


def test_a_method_row_is_identified_by_its_own_rule_settings_only():
    softmax = SearchOptions(method="softmax-weighted", vote_temperature=0.3).identity()
    assert softmax["vote_temperature"] == 0.3 and "keep_fraction" not in softmax and "mob_resamples" not in softmax
    assert "vote_temperature" not in SearchOptions(method="best-of-n").identity()
    assert "vote_temperature" not in SearchOptions(budgets=(4,), beam_width=2).identity()


def test_bad_selection_settings_are_reported_together():
    with pytest.raises(PRMError) as err:
        SearchOptions(vote_temperature=-1, keep_fraction=1.5, mob_fraction=0, mob_resamples=0)
    for part in ("vote_temperature=-1", "keep_fraction=1.5", "mob_fraction=0", "mob_resamples=0"):
        assert part in str(err.value)
