"""Free auxiliary rows that isolate the one skill the benchmark's PRMs lack: whether `a op b = c` is true.

Every first mistake of the benchmark policy's wrong samples is a false equation (bench/error_kinds.py). A row here
is one step of the policy's own right solutions, in its own words, with the equation's numbers drawn anew (operands
of the same number of digits, a division still exact, a difference still non-negative) and its result either right
or a slip away (bench/lifecycle/minimal_pairs.py's offsets: off by 1, 2, 3, 5 or 10), labelled by its truth alone.
The numbers no longer follow from the problem, so such a row teaches arithmetic, not the plan; these policies never
get the plan wrong, so nothing it teaches is false for them.
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

from lifecycle.exact import NUMBER, equations, number
from lifecycle.minimal_pairs import wrong_value, written
from prmkit.data.problems import derive_seed

BINARY = re.compile(r"^\s*(\d+)\s*([-+*x/])\s*(\d+)\s*$")  # a two-operand equation of whole numbers


def templates(record: dict) -> list[tuple[str, int, int, str]]:
    """(step, expression start, result end, operator) of each step of a right record whose last equation is
    `a op b = c` of whole numbers."""
    out = []
    for step in record["completions"]:
        found = equations(step)
        if not found:
            continue
        last = found[-1]
        start = last.start + len(step[last.start:]) - len(step[last.start:].lstrip())  # the words' space stays
        match = BINARY.match(step[start:step.index("=", start)])
        if match:
            out.append((step, start, last.result_end, match.group(2)))
    return out


def operands_like(a: int, b: int, operator: str, rng: random.Random) -> tuple[int, int, Fraction]:
    """Two new operands with as many digits as `a` and `b`, and their exact result: a division stays exact and a
    difference non-negative, as the benchmark's problems keep them."""
    def like(n: int) -> int:
        digits = len(str(abs(n)))
        return rng.randint(10 ** (digits - 1) if digits > 1 else 1, 10 ** digits - 1)

    if operator == "/":
        b_new = like(b)
        quotient = max(1, like(max(a // max(b, 1), 1)))
        return b_new * quotient, b_new, Fraction(quotient)
    a_new, b_new = like(a), like(b)
    if operator == "-" and b_new > a_new:
        a_new, b_new = b_new, a_new
    value = {"+": a_new + b_new, "-": a_new - b_new, "*": a_new * b_new, "x": a_new * b_new}[operator]
    return a_new, b_new, Fraction(value)


def arithmetic_step(step: str, start: int, end: int, operator: str, rng: random.Random) -> tuple[str, int]:
    """The step with its equation's numbers drawn anew, right or a slip away (even odds), and its label; a number
    elsewhere in the step that stated the old result (a boxed answer) states the new one."""
    old = equations(step)[-1]
    a, b = (int(n) for n in BINARY.match(step[start:step.index("=", start)]).group(1, 3))
    a_new, b_new, right = operands_like(a, b, operator, rng)
    shown = right if rng.random() < 0.5 else wrong_value(right, rng)
    head = step[:start] + f"{a_new} {operator} {b_new} = {written(shown)}"
    tail = NUMBER.sub(lambda m: written(shown) if number(m.group(0)) == old.result else m.group(0), step[end:])
    return head + tail, int(shown == right)


def arithmetic_rows(records: list[dict], per_solution: int, seed: int) -> list[dict]:
    """`per_solution` auxiliary rows from each right record (`correct`, every step labelled 1) that has a template
    step: one-step completions under the record's prompt, labelled 1 when the equation is true. A row's draw comes
    from `seed` and the record's text, so a solution gets the same rows whatever else is in the list."""
    out = []
    for record in records:
        if not record.get("correct") or not all(v == 1 for v in record.get("labels") or [0]):
            continue
        found = templates(record)
        if not found:
            continue
        rng = random.Random(derive_seed(seed, "arithmetic", record["prompt"], *record["completions"]))
        for _ in range(per_solution):
            step, label = arithmetic_step(*rng.choice(found), rng)
            out.append({"prompt": record["prompt"], "completions": [step], "labels": [label],
                        "correct": bool(label), "group": record.get("group", record["prompt"]),
                        "source": "arithmetic"})
    return out
