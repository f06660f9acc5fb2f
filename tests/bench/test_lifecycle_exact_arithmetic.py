"""The exact judge on chained expressions, negative numbers and carried values: the arithmetic a policy writes
when it merges two gold steps into one or when a problem's chain passes below zero."""

from fractions import Fraction

from lifecycle.exact import equations, exact_labels
from lifecycle.problems import gold_values

# a chain that goes below zero: 5 - 8 = -3, then -3 * 2 = -6, then -6 + 10 = 4
PROMPT = "A lift is on floor 5 and goes down 8 floors, then 2 times as far again, then up 10 floors. Where is it?"
GOLD = ["It goes from 5 down 8, to 5 - 8 = -3.", "Twice as far again is -3 * 2 = -6.",
        "Up 10 floors from there is -6 + 10 = 4."]


def judge(steps: list[str]) -> list[int]:
    return exact_labels(PROMPT, steps, gold_values(GOLD), "4")


def test_gold_values_read_negative_results():
    assert gold_values(GOLD) == [-3, -6, 4]


def test_negative_results_and_operands_are_read_with_their_sign():
    assert judge([*GOLD[:2], GOLD[2] + " The answer is \\boxed{4}."]) == [1, 1, 1]
    # the sign dropped: 5 - 8 = 3 is false arithmetic, and a later -3 is known from nowhere
    assert judge(["It goes from 5 down 8, to 5 - 8 = 3.", *GOLD[1:]]) == [0, 0, 0]
    assert judge([GOLD[0], "Twice as far again is -3 * 2 = 6."]) == [1, 0]


def test_a_chained_expression_is_evaluated_whole():
    # two gold steps merged into one: 5 - 8 and then times 2 is not what it writes; (5 - 8) * 2 is
    assert judge(["Down 8 and twice as far again: (5 - 8) * 2 = -6.", "Up 10: -6 + 10 = 4."]) == [1, 1]
    assert judge(["Down 8 and twice as far again: 5 - 8 * 2 = -6."]) == [0]  # precedence: 5 - 16 = -11
    tiles = ("A office is 9 m by 4 m and a hall is 5 m by 2 m. Tiles cost 2 dollars per square metre. How many "
             "dollars does it cost to tile both rooms?")
    gold = [36, 10, 46, 92]
    assert exact_labels(tiles, ["The rooms cover 9 * 4 + 5 * 2 = 46 square metres.",
                                "The tiles cost 46 * 2 = 92 dollars."], gold, "92") == [1, 1]
    # 9 + 4 + 5 = 18 is true but off the gold path; 9 + 4 + 5 = 12 is false
    assert exact_labels(tiles, ["9 + 4 + 5 = 18."], gold, "92") == [0]
    assert exact_labels(tiles, ["3 + 4 + 5 = 12."], [12], "12") == [0]  # 3 is not in the problem


def test_chained_additions_and_an_inexact_division_in_a_chain():
    prompt = "Ana has 3 red, 4 blue and 5 green pens and shares them among 4 friends. How many does each get?"
    assert exact_labels(prompt, ["She has 3 + 4 + 5 = 12 pens.", "Each gets 12 / 4 = 3 pens."], [12, 3], "3") \
        == [1, 1]
    assert exact_labels(prompt, ["Each gets (3 + 4 + 5) / 4 = 3 pens."], [12, 3], "3") == [1]
    assert exact_labels(prompt, ["Each gets (3 + 4 + 4) / 4 = 2 pens."], [12, 3, 2], "3") == [0]  # 11/4 is not 2


def test_a_value_carried_from_a_wrong_step_is_wrong_after_a_negative_slip():
    slip = "Twice as far again is -3 * 2 = -5."
    assert judge([GOLD[0], slip, "Up 10 floors from there is -5 + 10 = 5."]) == [1, 0, 0]
    # the carried -5 is not known without the wrong step either
    assert judge([GOLD[0], "Up 10 floors from there is -5 + 10 = 5."]) == [1, 0]


def test_a_right_equation_beside_a_wrong_stated_number_is_wrong():
    # the step computes -6 and then states -7, the value a later step would carry
    assert judge([GOLD[0], "Twice as far again is -3 * 2 = -6, so it is on floor -7."]) == [1, 0]
    assert judge([GOLD[0], "Twice as far again is -3 * 2 = -6, so it is on floor -6."]) == [1, 1]
    # a known magnitude restated without its sign is not a new number
    assert judge([GOLD[0], "That is 3 floors below the ground."]) == [1, 1]


def test_the_equation_reader_leaves_words_and_notation_out():
    read = [(e.operands, e.result, e.true) for e in equations("so its area is 9 × 4 = 36 m^2, and 36 - 40 = -4")]
    assert read == [((9, 4), 36, True), ((36, 40), -4, True)]
    # a spaced dash before a number is punctuation, a sign written against a number is the number's
    assert [(e.operands, e.result) for e in equations("apples - 3 + 4 = 7")] == [((3, 4), 7)]
    assert [(e.operands, e.result) for e in equations("5 - -3 = 8")] == [((5, -3), 8)]
    assert [e.value for e in equations("7 / 2 = 3.5")] == [Fraction(7, 2)]
    assert equations("x = 5") == [] and equations("7 / 0 = 1")[0].true is False
