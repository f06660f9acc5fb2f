"""bench/lifecycle/arithmetic_steps.py: one-step rows in the policy's words whose equation is drawn anew, labelled
by its truth alone, with operands of the same digits, exact divisions, non-negative differences and slips a
minimal-pair offset away; only right solutions are used, and a solution's rows do not depend on the others."""

from fractions import Fraction

import pytest

from lifecycle.arithmetic_steps import arithmetic_rows, templates
from lifecycle.exact import equations
from lifecycle.minimal_pairs import OFFSETS

PROMPT = "Ethan buys 8 bags of 17 apples. He gives 2 away and shares the rest among 3 friends. How many each?"
RIGHT = {"prompt": PROMPT, "correct": True, "labels": [1, 1, 1], "completions": [
    "He buys 8 bags of 17 apples, so he has 8 * 17 = 136 apples.",
    "After giving 2 away, he has 136 - 2 = 134 apples.",
    "Each friend gets 134 / 2 = 67 apples. The answer is \\boxed{67}."]}
WRONG = {**RIGHT, "correct": False, "labels": [1, 1, 0]}


def test_each_row_is_labelled_by_its_equations_truth_in_the_policys_words():
    rows = arithmetic_rows([RIGHT], per_solution=200, seed=0)
    assert len(rows) == 200 and {r["labels"][0] for r in rows} == {0, 1}
    for row in rows:
        step = row["completions"][0]
        equation = equations(step)[-1]
        assert row["labels"] == [int(equation.true)] and row["correct"] == equation.true
        assert row["prompt"] == PROMPT and row["source"] == "arithmetic"
        assert any(step.startswith(t[0][:t[1]]) for t in templates(RIGHT))  # the words before the sum are kept
        if not equation.true:
            assert abs(equation.result - equation.value) in {Fraction(o) for o in OFFSETS}


def test_new_operands_keep_digits_exact_division_and_non_negative_difference():
    for row in arithmetic_rows([RIGHT], per_solution=300, seed=1):
        step = row["completions"][0]
        equation = equations(step)[-1]
        a, b = equation.operands
        if " * " in step:
            assert len(str(a)) == 1 and len(str(b)) == 2
        elif " - " in step:
            assert a >= b and len(str(a)) == 3 and len(str(b)) == 1
        else:
            assert equation.value.denominator == 1 and len(str(b)) == 1
            assert "\\boxed{" + str(equation.result) + "}" in step  # the stated answer follows the shown result


def test_only_right_solutions_are_used_and_rows_do_not_depend_on_the_others():
    assert arithmetic_rows([WRONG], per_solution=5, seed=0) == []
    alone = arithmetic_rows([RIGHT], per_solution=5, seed=0)
    assert arithmetic_rows([WRONG, RIGHT], per_solution=5, seed=0) == alone
    assert arithmetic_rows([RIGHT], per_solution=5, seed=1) != alone


@pytest.mark.parametrize("step", ["He has 3 + 4 + 5 = 12 apples.", "He has 12 apples."])
def test_steps_without_a_two_operand_equation_are_no_template(step):
    assert templates({**RIGHT, "completions": [step]}) == []
