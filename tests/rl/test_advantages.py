"""Per-token advantages by hand: groups worked out on paper for each rule and each edge case the module defines
(steps of unequal token length, a step ending inside a token, one completion in a group, identical rewards)."""

from __future__ import annotations

import pytest

from prmkit.rl.advantages import (
    EPS,
    char_ends,
    group_advantages,
    normalize,
    normalize_steps,
    token_ends,
    token_rewards,
)

# Group of two: A has steps rewarded 0.1 (tokens 0-2) and 0.9 (tokens 3-5); B one step of 0.5 over 4 tokens.
# All three steps: mean 0.5, Bessel std sqrt((0.16 + 0.16 + 0) / 2) = 0.4, so A's steps normalise to -/+ 0.4 / 0.4001.
REWARDS = [[0.1, 0.9], [0.5]]
ENDS = [[2, 5], [3]]
LENGTHS = [6, 4]
Z = 0.4 / (0.4 + EPS)


def test_steps_are_normalised_over_all_steps_of_the_group():
    a, b = normalize_steps(REWARDS)
    assert a == pytest.approx([-Z, Z]) and b == pytest.approx([0.0])


def test_sum_rule_gives_each_token_the_sum_of_the_steps_that_end_at_or_after_it():
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "sum")
    assert a == pytest.approx([0.0, 0.0, 0.0, Z, Z, Z])  # -Z + Z before the first step's end, then Z
    assert b == pytest.approx([0.0] * 4)


def test_min_rule_gives_each_token_the_smallest_future_step_reward():
    a, _ = group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "min")
    assert a == pytest.approx([-Z, -Z, -Z, Z, Z, Z])


def test_outcome_rule_is_plain_grpo_broadcast_over_the_tokens():
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [1.0, 0.0], "outcome")
    z = 0.5 / (0.5 ** 0.5 + EPS)  # two outcomes 1 and 0: mean 0.5, Bessel std sqrt(0.5)
    assert a == pytest.approx([z] * 6) and b == pytest.approx([-z] * 4)


def test_outcome_weight_adds_the_normalised_outcome_to_every_token():
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [1.0, 0.0], "sum", outcome_weight=0.5)
    z = 0.5 / (0.5 ** 0.5 + EPS)
    assert a == pytest.approx([0.5 * z] * 3 + [Z + 0.5 * z] * 3) and b == pytest.approx([-0.5 * z] * 4)


def test_identical_rewards_and_a_group_of_one_give_no_signal():
    same = group_advantages([[0.7, 0.7], [0.7]], ENDS, LENGTHS, [1.0, 1.0], "sum", outcome_weight=1.0)
    assert same == [[0.0] * 6, [0.0] * 4]
    assert normalize([0.3]) == [0.0]
    # one completion with unequal steps is still compared with itself; its outcome has nothing to compare with
    (alone,) = group_advantages([[0.2, 0.6]], [[1, 4]], [5], [1.0], "sum", outcome_weight=1.0)
    z = 0.2 / ((0.08 ** 0.5) + EPS)  # steps 0.2 and 0.6: mean 0.4, Bessel std sqrt(0.08)
    assert alone == pytest.approx([0.0, 0.0, z, z, z])


def test_a_step_that_ends_inside_a_token_ends_at_that_token_and_trailing_tokens_join_the_last_step():
    pieces = ["ab", "c\n", "\nde", "f", "!"]  # text "abc\n\ndef!"; a fake tokenizer: one piece per id
    text = "".join(pieces)
    ends = char_ends(text, ["abc", "def"])
    assert ends == [3, 8]

    def decode(ids):
        return "".join(pieces[i] for i in ids)

    # "abc" ends inside token 1 ("c\n"); "def" ends in token 3, but the last step takes the trailing "!" too
    assert token_ends(list(range(5)), ends, decode) == [1, 4]


def test_a_step_not_found_in_the_text_shares_the_previous_end():
    assert char_ends("one two", ["one", "zzz", "two"]) == [3, 3, 7]


def test_an_unknown_rule_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="'mean' is not known; use one of sum, min, outcome"):
        group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "mean")


def test_token_rewards_put_each_step_reward_at_its_end_token_and_zero_elsewhere():
    assert token_rewards([0.1, 0.9], [2, 5], 6) == pytest.approx([0, 0, 0.1, 0, 0, 0.9])
    # two steps that end in one token add up there: the reward-to-go of every earlier token stays the same
    assert token_rewards([0.2, 0.3, 0.4], [1, 1, 3], 4) == pytest.approx([0, 0.5, 0, 0.4])
    assert token_rewards([], [], 3) == [0.0, 0.0, 0.0]
    with pytest.raises(AssertionError, match="outside"):
        token_rewards([1.0], [4], 4)
