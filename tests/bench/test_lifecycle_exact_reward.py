"""The exact judge as a process reward (bench/lifecycle/exact_reward.py): the trainer's split into steps, 1 for a
right step and 0 from the first wrong one on, chat prompts read as their problem."""

import pytest

from lifecycle.exact_reward import ExactStepReward
from prmkit.errors import PRMError

ROW = {"prompt": "Ann has 3 bags of 4 apples and eats 5. How many apples are left?", "gold_answer": "7",
       "gold_steps": ["3 bags of 4 apples make 3 * 4 = 12 apples.", "After eating 5, 12 - 5 = 7 apples are left."]}
RIGHT = "3 bags of 4 apples make 3 * 4 = 12 apples.\n\n12 - 5 = 7 apples are left. The answer is \\boxed{7}."
SLIP = "3 bags of 4 apples make 3 * 4 = 14 apples.\n\n14 - 5 = 9 apples are left. The answer is \\boxed{9}."
LATE = "3 bags of 4 apples make 3 * 4 = 12 apples.\n\n12 - 5 = 8 apples are left.\n\nThe answer is \\boxed{8}."
UNFINISHED = "3 bags of 4 apples make 3 * 4 = 12 apples.\n\nShe eats some of them."


def test_each_step_is_scored_right_until_the_first_wrong_one():
    judge = ExactStepReward([ROW])
    assert judge.step_scores_many([ROW["prompt"]] * 3, [RIGHT, SLIP, LATE]) == [[1.0, 1.0], [0.0, 0.0],
                                                                             [1.0, 0.0, 0.0]]


def test_a_chain_that_never_states_an_answer_ends_on_a_wrong_step():
    # the judge alone calls prose without numbers right: a chain that stops early would earn a full reward
    assert ExactStepReward([ROW]).step_scores_many([ROW["prompt"]], [UNFINISHED]) == [[1.0, 0.0]]


def test_a_chat_prompt_is_read_as_its_problem_and_an_empty_completion_has_no_step():
    chat = [{"role": "system", "content": "Solve step by step."}, {"role": "user", "content": ROW["prompt"]}]
    assert ExactStepReward([ROW]).step_scores_many([chat, chat], [RIGHT, "\n\n"]) == [[1.0, 1.0], None]


def test_a_problem_without_its_gold_chain_is_refused():
    with pytest.raises(PRMError, match="no gold_steps"):
        ExactStepReward([{**ROW, "gold_steps": []}])
    with pytest.raises(PRMError, match="no gold chain for the prompt"):
        ExactStepReward([ROW]).step_scores_many(["How many pears?"], [RIGHT])
