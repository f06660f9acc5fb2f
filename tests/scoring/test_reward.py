"""PRMReward honours the contract of TRL's GRPOTrainer reward functions (tested directly; trl is not needed)."""

import pytest

from prmkit.errors import PRMError
from prmkit.scoring.reward import PRMReward
from prmkit.scoring.scorer import PRMScorer

PROMPT = "Tom has 3 bags of 4 apples. How many apples?"
GOOD = "3 * 4 = 12.\n\nHe has 12 apples."
BAD = "3 * 4 = 13.\n\nHe has 13 apples."


@pytest.fixture(scope="module")
def scorer(tiny_run):
    return PRMScorer.from_pretrained(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def reward(scorer):
    return PRMReward(scorer, aggregate="min")


def test_strings_one_float_per_completion(reward, scorer):
    rewards = reward(prompts=[PROMPT] * 3, completions=[GOOD, BAD, GOOD], completion_ids=[[1], [2], [3]],
                     trainer_state=None, answer=["12"] * 3)  # extra columns TRL passes are ignored
    assert len(rewards) == 3 and all(isinstance(r, float) for r in rewards)
    assert rewards[0] == pytest.approx(min(scorer.score(PROMPT, ["3 * 4 = 12.", "He has 12 apples."])), abs=1e-6)
    assert rewards[0] == rewards[2]
    assert reward.__name__ == "prm_min" and PRMReward(scorer, name="step_prm").__name__ == "step_prm"


def test_conversational_inputs_score_like_strings(reward):
    prompts = [[{"role": "system", "content": "Think step by step."}, {"role": "user", "content": PROMPT}]] * 2
    completions = [[{"role": "assistant", "content": GOOD}], [{"role": "assistant", "content": BAD}]]
    assert reward(prompts, completions) == pytest.approx(reward([PROMPT] * 2, [GOOD, BAD]), abs=1e-6)


def test_empty_completion_gets_the_floor_never_a_high_score(reward):
    rewards = reward([PROMPT] * 4, [GOOD, "", "  \n\n \t", [{"role": "assistant", "content": ""}]])
    assert rewards[1:] == [0.0, 0.0, 0.0] and rewards[0] > 0.0
    assert PRMReward(reward.scorer, floor=-1.0)([PROMPT], [""]) == [-1.0]
    assert reward([], []) == []


def test_truncated_completion_policy(scorer):
    long = "\n\n".join(["3 * 4 = 12."] * 80)  # later steps fall past max_length
    kept = PRMReward(scorer)([PROMPT], [long])[0]
    assert 0.0 < kept < 1.0
    assert PRMReward(scorer, truncated="floor", floor=-0.5)([PROMPT], [long]) == [-0.5]


def test_step_rewards(reward, scorer):
    steps = reward.step_rewards(PROMPT, GOOD)
    assert steps == pytest.approx(scorer.score(PROMPT, ["3 * 4 = 12.", "He has 12 apples."]), abs=1e-6)
    assert reward.step_rewards(PROMPT, "   ") == []
    long = reward.step_rewards(PROMPT, "\n\n".join(["3 * 4 = 12."] * 80))
    assert len(long) == 80 and long[-1] == reward.floor


def test_bad_arguments(scorer, reward):
    with pytest.raises(PRMError, match="2 prompts for 1 completions"):
        reward([PROMPT, PROMPT], [GOOD])
    with pytest.raises(PRMError, match="aggregate='median'"):
        PRMReward(scorer, aggregate="median")
    with pytest.raises(PRMError, match="truncated='drop'"):
        PRMReward(scorer, truncated="drop")
