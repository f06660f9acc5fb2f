"""Exact step labels for a policy's solution of a synthetic problem, judged against the problem's gold chain.

The rule, for step i of a solution:
- every equation "a op b = c" it writes is true arithmetic (integer division must be exact);
- every operand of those equations is a number the problem states or a result an earlier step reached;
- the result of each equation is a value the gold chain computes (any of its steps: the order of independent steps
  may differ from the gold chain's);
- a step without an equation states no number that is not already known (in the problem, or reached before);
- a step that states an answer (\\boxed{}, "The answer is") states the gold answer;
- and every earlier step is correct: a step built on a wrong one is wrong, even when its own arithmetic holds, as
  the synthetic data and omega's `negative` policy label it.
"""

from __future__ import annotations

import re

from lifecycle.problems import EQUATION

NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?")
STATED_ANSWER = re.compile(r"\\boxed\{([^{}]*)\}|[Tt]he answer is:?\s*\$?(-?[\d.,]+)")
OPERATIONS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "x": lambda a, b: a * b,
    "×": lambda a, b: a * b, "/": lambda a, b: a // b if b and a % b == 0 else None,
}


def _number(text: str) -> int | float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def step_is_right(step: str, known: set, gold_values: set, gold_answer: str) -> tuple[bool, set]:
    """Whether one step is right on its own, given the numbers known before it, and the results it reaches."""
    reached: set = set()
    equations = list(EQUATION.finditer(step))
    for match in equations:
        a, op, b, c = int(match.group(1)), match.group(2), int(match.group(3)), int(match.group(4))
        if OPERATIONS[op](a, b) != c or a not in known | reached or b not in known | reached or c not in gold_values:
            return False, reached
        reached.add(c)
    answers = [m.group(1) if m.group(1) is not None else m.group(2) for m in STATED_ANSWER.finditer(step)]
    if any(_number(answer) != _number(gold_answer) for answer in answers):
        return False, reached
    if not equations:
        outside = re.sub(STATED_ANSWER, "", step)
        if any(_number(n) not in known for n in NUMBER.findall(outside)):
            return False, reached
    return True, reached


def exact_labels(prompt: str, steps: list[str], gold_values: list[int], gold_answer: str) -> list[int]:
    """1 for each right step, 0 for a wrong one and for every step after it."""
    known = {_number(n) for n in NUMBER.findall(prompt)}
    labels: list[int] = []
    for step in steps:
        right, reached = step_is_right(step, known, set(gold_values), gold_answer)
        if not right or (labels and labels[-1] == 0):
            labels.append(0)
            continue
        labels.append(1)
        known |= reached
    return labels
