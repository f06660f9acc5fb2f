"""The two labelling methods, as plans that ask for rollouts and turn their outcomes into step labels.

A method runs as a Python generator: it yields the steps it wants measured (step i = continue the solution after
its first i + 1 steps), is sent back how many of the k rollouts from each reached the gold answer, and returns
the solution's `StepLabels`. The runner drives many of these at once, so the rollouts of several solutions share
each generate call, and the methods never see a model, which keeps them testable with counts alone.

mc (Math-Shepherd, Wang et al. 2024): every step but the last is measured; a step's soft value is the fraction of
its rollouts that reach the gold answer, its hard value whether any does. The last step needs no rollouts: the
solution itself ends there, so its value is whether the solution's own answer is right.

omega (the binary search of OmegaPRM, Luo et al. 2024): a prefix "succeeds" when any of its k rollouts reaches
the gold answer. A solution whose final answer is wrong fails at its last step; the empty prefix is taken to
succeed (the problem is solvable). Binary search between the two finds the first step after which no rollout
succeeds in at most ceil(log2(steps)) rounds of k rollouts; the steps before it are positive, it is negative, and
later steps are negative or null. This rests on monotonicity: once a prefix has gone wrong, no longer prefix of
the same solution succeeds, and before that every prefix does. A solution whose final answer is right is labelled
all positive with no rollouts, which rests on the same assumption read backwards: a right final answer means no
step went wrong. Neither holds always (a lucky recovery, a right answer from wrong working); both are what OmegaPRM
assumes, and both make omega cheaper than mc by a factor of about steps / log2(steps), or more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generator

Plan = Generator[list[int], list[int], "StepLabels"]


@dataclass(frozen=True)
class StepLabels:
    labels: list  # what goes in the record's `labels`: soft values, or 1/0 (omega: null after the error)
    values: list  # fraction of rollouts that reached the gold answer per step; null where not measured
    hard: list  # 1 when any rollout from the step reached the gold answer, else 0; null where not decided
    first_error: int | None = None  # omega: the first failing step, -1 when none; mc: None


def mc(steps: int, correct: bool, k: int, label: str) -> Plan:
    hits = (yield list(range(steps - 1))) if steps > 1 else []
    values = [h / k for h in hits] + [float(correct)]
    hard = [int(h > 0) for h in hits] + [int(correct)]
    return StepLabels(labels=values if label == "soft" else hard, values=values, hard=hard)


def omega(steps: int, correct: bool, k: int, after_error: str) -> Plan:
    if correct:
        return StepLabels(labels=[1] * steps, values=[None] * (steps - 1) + [1.0], hard=[1] * steps,
                          first_error=-1)
    lo, hi = -1, steps - 1  # prefix lo succeeds (the empty prefix by assumption), prefix hi fails (wrong answer)
    measured: dict[int, float] = {}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        (hits,) = yield [mid]
        measured[mid] = hits / k
        lo, hi = (mid, hi) if hits > 0 else (lo, mid)
    after = 0 if after_error == "negative" else None
    labels = [1] * hi + [0] + [after] * (steps - hi - 1)
    values = [measured.get(i) for i in range(steps)]
    values[-1] = 0.0
    return StepLabels(labels=labels, values=values, hard=list(labels), first_error=hi)


def plan(method: str, steps: int, correct: bool, k: int, label: str, after_error: str | None) -> Plan:
    if method == "mc":
        return mc(steps, correct, k, label)
    return omega(steps, correct, k, after_error or "negative")


def max_rollouts(method: str, steps: int, k: int) -> int:
    """The most rollouts one solution of `steps` steps can cost (omega: when its final answer is wrong)."""
    if method == "mc":
        return (steps - 1) * k
    return math.ceil(math.log2(steps)) * k if steps > 1 else 0
