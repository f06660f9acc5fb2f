"""`completion_steps`, the rules that turn a completion's step scores into step rewards on end tokens (shared by
ProcessGRPOTrainer and the verl reward manager), by hand: one token per character, so every end token is the
index of a step's last character. Every defined case: a score per step, unread (None) and failed (NaN) scores,
fewer scores than steps, no step, no token, and the case that is an error: more scores than steps."""

from __future__ import annotations

import math

import pytest

from prmkit.data.records import split_steps
from prmkit.errors import PRMError
from prmkit.rl.advantages import completion_steps

FLOOR = -1.0  # not 0, so a floored step shows


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids) -> str:
    return "".join(chr(i) for i in ids)


def steps_of(text: str, scores):
    return completion_steps(chars(text), text, split_steps(text, " "), scores, FLOOR, decode)


def test_each_step_reward_sits_on_its_last_character_and_the_last_step_on_the_last_token():
    # "ab cde f " : "ab" ends at token 1, "cde" at 5, "f" at 7, moved to the last token (8, the trailing space)
    assert steps_of("ab cde f ", [0.1, 0.5, 0.9]) == ([0.1, 0.5, 0.9], [1, 5, 8])


def test_an_unread_step_and_a_nan_score_get_the_floor():
    rewards, ends = steps_of("ab cde f", [None, math.nan, 0.9])
    assert rewards == [FLOOR, FLOOR, 0.9] and ends == [1, 5, 7]


def test_steps_past_the_scores_returned_get_the_floor():
    assert steps_of("ab cde f", [0.3]) == ([0.3, FLOOR, FLOOR], [1, 5, 7])
    assert steps_of("ab cde f", []) == ([FLOOR] * 3, [1, 5, 7])


def test_more_scores_than_steps_is_an_error_that_names_both_counts():
    with pytest.raises(PRMError, match=r"4 step scores for a completion of 3 steps \('ab cde f'\): it scored "
                                       r"another text, or cut it at another separator"):
        steps_of("ab cde f", [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(PRMError, match="1 step scores for a completion of 0 steps"):
        steps_of("   ", [0.5])


def test_a_completion_with_no_step_is_one_floor_step_on_its_last_token():
    assert steps_of("   ", None) == ([FLOOR], [2])
    assert steps_of("", None) == ([FLOOR], [0])  # no token at all: the caller gives it no advantage


def test_a_step_that_ends_inside_a_token_ends_at_that_token(tokenizer):
    text = "3 + 12 = 15 apples"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]

    def detok(part):
        return tokenizer.decode(part, skip_special_tokens=True)

    assert [detok([i]) for i in ids] == ["3", " +", " 12", " =", " 15", " apples"]
    # cut at "2": the first step "3 + 1" ends inside the token " 12" (token 2), the second on the last token
    rewards, ends = completion_steps(ids, text, split_steps(text, "2"), [0.25, 0.75], FLOOR, detok)
    assert rewards == [0.25, 0.75] and ends == [2, 5]


# One rule for every per-step reward: a step the PRM did not read (None) or could not score (NaN, infinite) gets
# the floor, whether the rewards go to ProcessGRPOTrainer, the verl manager or a user's own trainer.
SCORES = [0.5, None, math.nan, math.inf, -math.inf]
FLOORED = [0.5, FLOOR, FLOOR, FLOOR, FLOOR]
CHAIN = "a b c d e"  # five steps at the separator " "


def test_the_shared_rule_floors_unread_nan_and_infinite_step_scores():
    from prmkit.scoring.aggregate import floor_steps

    assert floor_steps(SCORES, FLOOR) == FLOORED
    assert steps_of(CHAIN, SCORES)[0] == FLOORED  # completion_steps: the trainer's and the verl manager's


def test_prm_reward_step_rewards_floor_unread_nan_and_infinite_scores():
    from prmkit.scoring.reward import PRMReward
    from prmkit.scoring.scorer import PRMScorer

    class ScoresGiven(PRMScorer):
        """A PRMScorer that answers SCORES for a chain's steps; no model is built."""

        def __init__(self):
            pass

        def score_many(self, chains):
            return [list(SCORES[:len(steps)]) for _, steps in chains]

    reward = PRMReward(ScoresGiven(), floor=FLOOR, separator=" ")
    assert reward.step_rewards("What is it?", CHAIN) == FLOORED
    assert reward.step_rewards("What is it?", "   ") == []  # no step: nothing to reward


def test_remote_step_rewards_floor_unread_nan_and_infinite_scores():
    import asyncio

    from prmkit.serving.clients import RemotePRMReward

    reward = RemotePRMReward("http://127.0.0.1:1", floor=FLOOR, separator=" ")
    sent = []

    async def answer(client, body):  # the server's answer to POST /v1/score, as the client parses it
        sent.append(body)
        return {"step_scores": list(SCORES[:len(body["steps"])])}

    reward._post = answer
    assert asyncio.run(reward.step_rewards("What is it?", CHAIN)) == FLOORED
    assert sent == [{"prompt": "What is it?", "steps": CHAIN.split()}]
