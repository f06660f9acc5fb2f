"""Minimal pairs from a right solution: one step's result changed, carried to the answer, labels for free."""

from lifecycle.exact import equations, exact_labels
from lifecycle.minimal_pairs import minimal_pair
from lifecycle.problems import gold_values

PROMPT = ("A office is 9 m by 4 m and a hall is 5 m by 2 m. Tiles cost 2 dollars per square metre. How many "
          "dollars does it cost to tile both rooms?")
RIGHT = ["First find the area of each room.",
         "The office is 9 m by 4 m, so its area is 9 * 4 = 36 square metres.",
         "The hall is 5 m by 2 m, so its area is 5 * 2 = 10 square metres.",
         "Together the rooms cover 36 + 10 = 46 square metres.",
         "At 2 dollars per square metre, the tiles cost 46 * 2 = 92 dollars.",
         "The answer is \\boxed{92}."]
RECORD = {"prompt": PROMPT, "completions": RIGHT, "labels": [1] * 6, "correct": True, "group": PROMPT}
GOLD = [36, 10, 46, 92]


def pairs(seeds=range(40)) -> list[dict]:
    return [minimal_pair(RECORD, seed) for seed in seeds]


def test_the_changed_step_and_every_later_one_are_wrong_and_earlier_steps_untouched():
    for pair in pairs():
        at = pair["changed_step"]
        assert pair["labels"] == [1] * at + [0] * (len(RIGHT) - at)
        assert pair["completions"][:at] == RIGHT[:at]
        old, new = pair["changed_value"]
        assert old != new and pair["completions"][at] != RIGHT[at] and f"= {new}" in pair["completions"][at]
        assert pair["correct"] is False and pair["source"] == "minimal-pair" and pair["group"] == PROMPT
        # the exact judge agrees with the free labels
        assert exact_labels(PROMPT, pair["completions"], GOLD, "92") == pair["labels"]
    assert RECORD["completions"] == RIGHT  # the right solution is not changed in place


def test_steps_without_a_result_are_never_chosen_and_every_result_step_can_be():
    chosen = {pair["changed_step"] for pair in pairs()}
    assert chosen == {1, 2, 3, 4}
    assert minimal_pair({**RECORD, "completions": ["Find the areas.", "The answer is \\boxed{92}."],
                         "labels": [1, 1]}, seed=0) is None


def test_the_same_seed_gives_the_same_pair():
    assert pairs(range(10)) == pairs(range(10))
    assert len({tuple(p["completions"]) for p in pairs()}) > 4


def test_the_changed_value_is_carried_to_the_final_answer():
    office = next(p for p in pairs() if p["changed_step"] == 1)
    wrong_area = int(office["changed_value"][1])
    total = wrong_area + 10
    assert office["completions"][3] == f"Together the rooms cover {wrong_area} + 10 = {total} square metres."
    assert office["completions"][4] == \
        f"At 2 dollars per square metre, the tiles cost {total} * 2 = {2 * total} dollars."
    assert office["completions"][5] == f"The answer is \\boxed{{{2 * total}}}."
    assert office["answer"] == str(2 * total)
    # every later equation holds: only the changed step's arithmetic is false
    assert [all(e.true for e in equations(step)) for step in office["completions"]] == \
        [True, False, True, True, True, True]


def test_a_negative_result_is_changed_and_carried_with_its_sign():
    prompt = "A lift is on floor 5, goes down 8 floors and then 2 times as far again. Where is it?"
    right = ["5 - 8 = -3.", "Then -3 * 2 = -6. The answer is \\boxed{-6}."]
    record = {"prompt": prompt, "completions": right, "labels": [1, 1]}
    chosen = set()
    for seed in range(20):
        pair = minimal_pair(record, seed)
        chosen.add(pair["changed_step"])
        if pair["changed_step"] == 0:
            first = int(pair["changed_value"][1])
            assert pair["completions"] == [f"5 - 8 = {first}.",
                                           f"Then {first} * 2 = {2 * first}. The answer is \\boxed{{{2 * first}}}."]
        assert exact_labels(prompt, pair["completions"], gold_values(right), "-6") == pair["labels"]
    assert chosen == {0, 1}
