"""The lifecycle benchmark's exact step judge, on hand-written steps of one synthetic problem."""

from lifecycle.exact import exact_labels
from lifecycle.problems import gold_values, problem_rows, small_number_problems, solution_text

PROMPT = ("A office is 9 m by 4 m and a hall is 5 m by 2 m. Tiles cost 2 dollars per square metre. How many "
          "dollars does it cost to tile both rooms?")
GOLD = ["The office is 9 m by 4 m, so its area is 9 * 4 = 36 square metres.",
        "The hall is 5 m by 2 m, so its area is 5 * 2 = 10 square metres.",
        "Together the rooms cover 36 + 10 = 46 square metres.",
        "At 2 dollars per square metre, the tiles cost 46 * 2 = 92 dollars."]


def judge(steps: list[str]) -> list[int]:
    return exact_labels(PROMPT, steps, gold_values(GOLD), "92")


def test_the_gold_chain_with_its_answer_is_right_at_every_step():
    assert judge(solution_text(GOLD, "92").split("\n\n")) == [1, 1, 1, 1]


def test_independent_steps_in_another_order_are_right():
    assert judge([GOLD[1], GOLD[0], GOLD[2], GOLD[3] + " The answer is \\boxed{92}."]) == [1, 1, 1, 1]


def test_wrong_arithmetic_is_wrong_and_so_is_everything_after_it():
    slip = "Together the rooms cover 36 + 10 = 47 square metres."
    assert judge([GOLD[0], GOLD[1], slip, "At 2 dollars per square metre, the tiles cost 47 * 2 = 94 dollars."]) \
        == [1, 1, 0, 0]


def test_a_value_carried_from_a_wrong_step_is_wrong_though_its_own_arithmetic_holds():
    wrong_area = "The hall is 5 m by 2 m, so its area is 5 + 2 = 7 square metres."
    carried = "Together the rooms cover 36 + 7 = 43 square metres."
    assert judge([GOLD[0], wrong_area, carried]) == [1, 0, 0]
    # judged alone (the wrong step left out), the carried step's operand 7 is still known from nowhere
    assert judge([GOLD[0], carried]) == [1, 0]


def test_true_arithmetic_off_the_gold_path_is_wrong():
    assert judge(["The office is 9 m by 4 m, so its perimeter is 9 + 4 = 13 metres."]) == [0]


def test_a_wrong_operation_with_the_right_numbers_is_wrong():
    assert judge([GOLD[0], GOLD[1], GOLD[2], "At 2 dollars per square metre, the tiles cost 46 + 2 = 48 dollars."]) \
        == [1, 1, 1, 0]


def test_a_stated_answer_must_be_the_gold_answer():
    assert judge([*GOLD, "The answer is \\boxed{92}."]) == [1, 1, 1, 1, 1]
    assert judge([GOLD[0], GOLD[1], GOLD[2] + " The answer is \\boxed{46}."]) == [1, 1, 0]


def test_a_step_without_an_equation_may_only_restate_known_numbers():
    assert judge([GOLD[0], "So the office covers 36 square metres."]) == [1, 1]
    assert judge([GOLD[0], "So the office covers 38 square metres."]) == [1, 0]


def test_an_inexact_division_is_wrong():
    prompt = "Mia buys 2 bags of 7 apples and shares them among 4 friends. How many does each get?"
    assert exact_labels(prompt, ["2 * 7 = 14 apples.", "14 / 4 = 3 each."], [14, 3], "3") == [1, 0]


def test_small_number_problems_keep_every_number_small_and_repeat_for_a_seed():
    records = small_number_problems(40, seed=5)
    assert records == small_number_problems(40, seed=5)
    assert all(v <= 100 for r in records for v in gold_values(r["completions"]))
    assert {len(r["completions"]) for r in records} >= {3, 4}
    rows = problem_rows(records)
    assert all(judge_row(row) for row in rows)


def judge_row(row: dict) -> bool:
    steps = solution_text(row["gold_steps"], row["gold_answer"]).split("\n\n")
    return exact_labels(row["prompt"], steps, gold_values(row["gold_steps"]), row["gold_answer"]) == [1] * len(steps)


def sample(text: str, correct: bool, score: float | None) -> dict:
    return {"solution": text, "correct": correct, "score": score}


def test_within_problem_auroc_counts_right_over_wrong_pairs_of_one_problem_only():
    from lifecycle.analysis import within_problem_auroc

    rows = [
        # two copies of the right text above one wrong sample, below another: 2 of 4 pairs, ties count half
        {"samples": [sample("a", True, 0.6), sample("a", True, 0.6), sample("b", False, 0.5),
                     sample("c", False, 0.6)]},
        # no wrong sample: no pair, though its right sample scores far below the other problem's
        {"samples": [sample("d", True, 0.1)]},
        # an unscored sample makes no pair
        {"samples": [sample("e", True, 0.9), sample("f", False, None)]},
    ]
    result = within_problem_auroc(rows)
    assert result["pairs"] == 4 and result["auroc"] == result["auroc_pooled"] == (1 + 1 + 0.5 + 0.5) / 4
    assert (result["problems"], result["one_sided"]) == (1, 2)  # the product's counts (prmkit eval's)
    assert result["distinct_right"] == (0.5 + 1 + 1) / 3 and result["distinct_wrong"] == 1.0
    assert within_problem_auroc(rows, n=1)["pairs"] == 0 and within_problem_auroc(rows, n=1)["auroc"] is None


def test_bench_intervals_are_prmkit_evals():
    from lifecycle.analysis import bootstrap_accuracy, paired_bootstrap

    from prmkit.evaluation import metrics

    a, b = [1, 1, 0, 1, 0, 1], [0, 1, 0, 0, 0, 1]
    assert paired_bootstrap(iter(a), b, seed=2) == metrics.paired_bootstrap(a, b, seed=2)
    accuracy = bootstrap_accuracy(a)
    assert accuracy["accuracy"] == 4 / 6 and accuracy["low"] <= 4 / 6 <= accuracy["high"]
    assert accuracy == metrics.bootstrap_mean(a)
