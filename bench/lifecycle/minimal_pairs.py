"""Minimal pairs: a right solution of the policy's own and a copy of it with one step's result changed.

The copy is on-policy text (every word is the policy's but one number and the values that follow from it), and its
labels cost nothing: the changed step and every step after it are wrong, the steps before it stay as they were. A
PRM trained on both sees two chains that differ at one known step, the contrast a ranking loss needs and sampled
chains rarely give (a policy's wrong chains usually differ from its right ones in many places at once).

The changed value is carried the way the solution carries it: a later equation that uses the old value uses the
new one and its result is computed again, and so on to the final answer; a number written outside an equation
that equals a changed value is changed too. The copy's final answer therefore follows the slip, and the copy is
labelled incorrect even where the slip never reaches the answer (a step of it is wrong).
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

from lifecycle.exact import NUMBER, equations, number
from prmkit.answers import extract_answer
from prmkit.data.problems import derive_seed

OFFSETS = (1, 2, 3, 5, 10)  # how far a slip lands from the right value: off by one, a carry, a place value


def wrong_value(right: Fraction, rng: random.Random) -> Fraction:
    """A value other than `right`, a small offset away, that keeps a non-negative value non-negative."""
    choices = [right + sign * offset for offset in OFFSETS for sign in (1, -1)
               if right < 0 or right + sign * offset >= 0]
    return rng.choice(choices)


def written(value: Fraction) -> str:
    """How a step writes a value: an integer plainly, anything else as a decimal (to 2 places where it repeats)."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def carry(text: str, changed: dict[Fraction, Fraction], start: int = 0) -> str:
    """`text` from `start` on with every number whose value `changed` maps written as its new value; then every
    equation that no longer holds gets its computed result, which is carried on (into `changed`) in turn."""
    def swap(match: re.Match) -> str:
        value = number(match.group(0))
        return written(changed[value]) if value in changed else match.group(0)

    text = text[:start] + NUMBER.sub(swap, text[start:])
    for _ in range(len(equations(text))):
        broken = next((e for e in equations(text) if e.result_start >= start and not e.true and e.value is not None),
                      None)
        if broken is None:
            break
        new = Fraction(written(broken.value))
        changed[broken.result] = new
        text = text[:broken.result_start] + written(new) + text[broken.result_end:]
        tail = broken.result_start + len(written(new))
        text = text[:tail] + NUMBER.sub(swap, text[tail:])
    return text


def minimal_pair(record: dict, seed: int) -> dict | None:
    """A copy of a right solution (`prompt`, `completions`, `labels` all 1) with the result of one step that
    computes something changed to a wrong value, carried on to the final answer, and that step and every later
    one labelled 0; the step, and the wrong value, are drawn with `random.Random(seed)`. None when no step
    writes an equation."""
    steps = list(record["completions"])
    labels = list(record.get("labels") or [1] * len(steps))
    assert all(label == 1 for label in labels), "a minimal pair is made from a right solution"
    candidates = [i for i, step in enumerate(steps) if equations(step)]
    if not candidates:
        return None
    rng = random.Random(seed)
    at = rng.choice(candidates)
    result = equations(steps[at])[-1]
    new = wrong_value(result.result, rng)
    changed = {result.result: new}
    step = steps[at]
    steps[at] = step[:result.result_start] + written(new) + step[result.result_end:]
    steps[at] = carry(steps[at], changed, start=result.result_start + len(written(new)))
    for later in range(at + 1, len(steps)):
        steps[later] = carry(steps[later], changed)
    return {**record, "completions": steps, "labels": labels[:at] + [0] * (len(steps) - at),
            "answer": extract_answer(steps[-1]), "correct": False, "source": "minimal-pair", "changed_step": at,
            "changed_value": [written(result.result), written(new)]}


def minimal_pairs(records: list[dict], per_solution: int, seed: int) -> list[dict]:
    """`per_solution` minimal pairs of every right record (`correct`, and every step labelled 1) that differ from
    each other and from every record given. A pair's seed comes from `seed` and the record's own text, so a
    solution gets the same pairs whatever else is in the list."""
    seen = {(r["prompt"], tuple(r["completions"])) for r in records}
    out = []
    for record in records:
        if not record.get("correct") or not record["labels"] or not all(v == 1 for v in record["labels"]):
            continue
        for index in range(per_solution):
            pair = minimal_pair(record, derive_seed(seed, "pair", record["prompt"], *record["completions"], index))
            key = pair and (pair["prompt"], tuple(pair["completions"]))
            if pair and key not in seen:
                seen.add(key)
                out.append(pair)
    return out
