"""Per-token advantages by hand: groups worked out on paper for each rule and each edge case the module defines
(steps of unequal token length, a step ending inside a token, one completion in a group, identical rewards), and
the scale that gives every rule unit root mean square per token. The rules' shapes are checked unscaled
(scale="none"); the scale's own tests work out the root mean square by hand."""

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
    unit_rms,
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
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "sum", scale="none")
    assert a == pytest.approx([0.0, 0.0, 0.0, Z, Z, Z])  # -Z + Z before the first step's end, then Z
    assert b == pytest.approx([0.0] * 4)


def test_min_rule_gives_each_token_the_smallest_future_step_reward():
    a, _ = group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "min", scale="none")
    assert a == pytest.approx([-Z, -Z, -Z, Z, Z, Z])


def test_outcome_rule_is_plain_grpo_broadcast_over_the_tokens():
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [1.0, 0.0], "outcome")
    z = 0.5 / (0.5 ** 0.5 + EPS)  # two outcomes 1 and 0: mean 0.5, Bessel std sqrt(0.5)
    assert a == pytest.approx([z] * 6) and b == pytest.approx([-z] * 4)


def test_outcome_weight_adds_the_normalised_outcome_to_every_token():
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [1.0, 0.0], "sum", outcome_weight=0.5, scale="none")
    z = 0.5 / (0.5 ** 0.5 + EPS)
    assert a == pytest.approx([0.5 * z] * 3 + [Z + 0.5 * z] * 3) and b == pytest.approx([-0.5 * z] * 4)


def test_identical_rewards_and_a_group_of_one_give_no_signal():
    same = group_advantages([[0.7, 0.7], [0.7]], ENDS, LENGTHS, [1.0, 1.0], "sum", outcome_weight=1.0)
    assert same == [[0.0] * 6, [0.0] * 4]
    assert normalize([0.3]) == [0.0]
    # one completion with unequal steps is still compared with itself; its outcome has nothing to compare with.
    # Steps 0.2 and 0.6 normalise to -z and +z, so the tokens sum to [0, 0, z, z, z]: mean square 3z^2 / 5, and
    # scaled to unit root mean square each z becomes sqrt(5 / 3), whatever z is
    (alone,) = group_advantages([[0.2, 0.6]], [[1, 4]], [5], [1.0], "sum", outcome_weight=1.0)
    r = (5 / 3) ** 0.5
    assert alone == pytest.approx([0.0, 0.0, r, r, r])


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


# The scale: the group's process values over all its tokens are divided by their root mean square.


def test_sum_is_scaled_to_unit_root_mean_square_over_the_groups_tokens():
    # unscaled: A [0, 0, 0, Z, Z, Z], B [0, 0, 0, 0]; mean square over the 10 tokens 3Z^2 / 10, so Z -> sqrt(10/3)
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "sum")
    s = (10 / 3) ** 0.5
    assert a == pytest.approx([0.0, 0.0, 0.0, s, s, s]) and b == pytest.approx([0.0] * 4)
    assert (3 * s ** 2) / 10 == pytest.approx(1.0)


def test_min_is_scaled_to_unit_root_mean_square_over_the_groups_tokens():
    # unscaled: A [-Z, -Z, -Z, Z, Z, Z], B zeros; mean square 6Z^2 / 10, so Z -> sqrt(10/6)
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "min")
    m = (10 / 6) ** 0.5
    assert a == pytest.approx([-m, -m, -m, m, m, m]) and b == pytest.approx([0.0] * 4)


def test_sum_and_min_move_the_policy_by_the_same_amount_once_scaled():
    # Two completions of four one-token steps, every step of A rewarded 1 and of B 0: the eight steps normalise to
    # +c (A) and -c (B). Unscaled, sum gives A [4c, 3c, 2c, c] (mean square 7.5c^2 over the 8 tokens) where min
    # gives A [c, c, c, c] (mean square c^2): sum's step is sqrt(7.5) = 2.7 times min's. Scaled, both have mean
    # square 1, and sum keeps its shape: A [4, 3, 2, 1] / sqrt(7.5).
    rewards, ends, lengths = [[1.0] * 4, [0.0] * 4], [[0, 1, 2, 3]] * 2, [4, 4]
    c = 0.5 / ((2 / 7) ** 0.5 + EPS)  # mean 0.5, Bessel std sqrt(8 x 0.25 / 7)
    sum_a, sum_b = group_advantages(rewards, ends, lengths, [0.0, 0.0], "sum", scale="none")
    min_a, min_b = group_advantages(rewards, ends, lengths, [0.0, 0.0], "min", scale="none")
    assert sum_a == pytest.approx([4 * c, 3 * c, 2 * c, c]) and sum_b == pytest.approx([-4 * c, -3 * c, -2 * c, -c])
    assert min_a == pytest.approx([c] * 4) and min_b == pytest.approx([-c] * 4)
    root = 7.5 ** 0.5
    sum_a, sum_b = group_advantages(rewards, ends, lengths, [0.0, 0.0], "sum")
    assert sum_a == pytest.approx([4 / root, 3 / root, 2 / root, 1 / root])
    assert sum_b == pytest.approx([-4 / root, -3 / root, -2 / root, -1 / root])
    min_a, min_b = group_advantages(rewards, ends, lengths, [0.0, 0.0], "min")
    assert min_a == pytest.approx([1.0] * 4) and min_b == pytest.approx([-1.0] * 4)


def test_the_outcome_term_keeps_its_unit_scale_under_the_scaled_process_term():
    # process term as in the sum test above (Z -> sqrt(10/3)); outcomes 1 and 0 normalise to +/- z, unscaled
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [1.0, 0.0], "sum", outcome_weight=0.5)
    s, z = (10 / 3) ** 0.5, 0.5 / (0.5 ** 0.5 + EPS)
    assert a == pytest.approx([0.5 * z] * 3 + [s + 0.5 * z] * 3) and b == pytest.approx([-0.5 * z] * 4)
    # the outcome rule is plain GRPO with or without the scale
    a, b = group_advantages(REWARDS, ENDS, LENGTHS, [1.0, 0.0], "outcome")
    assert a == pytest.approx([z] * 6) and b == pytest.approx([-z] * 4)


def test_unit_rms_leaves_all_zero_values_and_empty_completions_alone():
    assert unit_rms([[0.0, 0.0], [0.0]]) == [[0.0, 0.0], [0.0]]
    assert unit_rms([[], []]) == [[], []]
    three, empty, four = unit_rms([[3.0], [], [-4.0]])  # mean square (9 + 16) / 2 over the two tokens
    assert three == pytest.approx([3 / 12.5 ** 0.5]) and empty == [] and four == pytest.approx([-4 / 12.5 ** 0.5])


def test_an_unknown_scale_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="scale 'std' is not known; use one of rms, none"):
        group_advantages(REWARDS, ENDS, LENGTHS, [0.0, 0.0], "sum", scale="std")
