"""One number per chain from its step scores, candidates ranked by it (best-of-N), and the rules that turn it into
an RL reward (PRMReward, the server and RemotePRMReward share them). No torch here: the command line reads these
names for its --help."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from prmkit.errors import PRMError

AGGREGATIONS = {
    "min": min,
    "max": max,
    "mean": lambda xs: sum(xs) / len(xs),
    "last": lambda xs: xs[-1],
    "prod": math.prod,
    "geometric_mean": lambda xs: math.prod(xs) ** (1.0 / len(xs)),
}
AGGREGATION_NAMES = tuple(AGGREGATIONS)


def aggregate(scores: Sequence[float | None], how: str = "min") -> float | None:
    """One number for a chain from its step scores (steps dropped by truncation are left out)."""
    if how not in AGGREGATIONS:
        raise PRMError(f"unknown aggregation {how!r}; use one of {', '.join(AGGREGATIONS)}")
    kept = [s for s in scores if s is not None]
    if how == "geometric_mean" and any(s < 0 for s in kept):
        return None  # an MSE head can go below 0, where a geometric mean has no meaning
    return AGGREGATIONS[how](kept) if kept else None


@dataclass
class RankedCandidate:
    rank: int  # 0 = best
    index: int  # position in the input list
    steps: list[str]
    step_scores: list[float | None]
    score: float | None  # the aggregate; None when no step was scored
    text: str | None = None  # the raw completion, when the candidate was given as one string


def rank_candidates(step_scores: Sequence[Sequence[float | None]], how: str = "min", *,
                    steps: Sequence[Sequence[str]] | None = None,
                    texts: Sequence[str | None] | None = None) -> list[RankedCandidate]:
    """Candidates best first by aggregate score; unscored ones last; ties keep input order."""
    scores = [aggregate(s, how) for s in step_scores]
    order = sorted(range(len(scores)), key=lambda i: (scores[i] is None, -(scores[i] or 0.0), i))
    return [RankedCandidate(rank=rank, index=i, steps=list(steps[i]) if steps else [],
                            step_scores=list(step_scores[i]), score=scores[i], text=texts[i] if texts else None)
            for rank, i in enumerate(order)]


TRUNCATED = ("kept", "floor")
FLOOR = 0.0  # the lowest probability of a bce PRM, and the wrong-step label of an mse one


def chain_reward(step_scores: Sequence[float | None], how: str, floor: float = FLOOR,
                 truncated: str = "kept") -> float:
    """One RL reward per chain, the rules every prmkit reward follows (PRMReward, the server, RemotePRMReward): a
    chain with no scored step gets the floor, so a policy cannot earn reward by saying nothing; with
    truncated="floor" a chain cut by max_length (a None among its step scores) gets the floor too, so hiding a bad
    step past the cut cannot pay under the `min` aggregation."""
    if truncated == "floor" and any(s is None for s in step_scores):
        return float(floor)
    value = aggregate(step_scores, how)
    return float(floor) if value is None else float(value)
