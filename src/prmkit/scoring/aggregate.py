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
    """One number for a chain from its step scores (steps dropped by truncation are left out). A NaN step score
    makes the aggregate NaN whatever the order (Python's min and max would otherwise keep or drop it by position)."""
    if how not in AGGREGATIONS:
        raise PRMError(f"unknown aggregation {how!r}; use one of {', '.join(AGGREGATIONS)}")
    kept = [s for s in scores if s is not None]
    if any(math.isnan(s) for s in kept):
        return math.nan
    if how == "geometric_mean" and any(s < 0 for s in kept):
        return None  # an MSE head can go below 0, where a geometric mean has no meaning
    return AGGREGATIONS[how](kept) if kept else None


def is_truncated(scores: Sequence[float | None]) -> bool:
    """Whether max_length (or a size limit) cut steps of this chain: their scores are None."""
    return any(s is None for s in scores)


def _usable(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


@dataclass
class RankedCandidate:
    rank: int  # 0 = best
    index: int  # position in the input list
    steps: list[str]
    step_scores: list[float | None]
    score: float | None  # the aggregate; None when no step was scored
    text: str | None = None  # the raw completion, when the candidate was given as one string
    truncated: bool = False  # max_length cut steps of this chain: they were not scored


def rank_candidates(step_scores: Sequence[Sequence[float | None]], how: str = "min", *,
                    steps: Sequence[Sequence[str]] | None = None, texts: Sequence[str | None] | None = None,
                    truncated: str = "floor") -> list[RankedCandidate]:
    """Candidates best first by aggregate score. The order is total and deterministic: candidates with no usable
    score (none scored, or a NaN) come last; with truncated="floor" (the default) a chain that max_length cut ranks
    below every chain the PRM read whole, so leaving its bad steps unread can never make it win (among cut chains
    the aggregate of what was read decides); "kept" ranks every chain by what was read; equal scores keep input
    order."""
    if truncated not in TRUNCATED:
        raise PRMError(f"truncated={truncated!r} is not known; use 'kept' or 'floor'")
    scores = [aggregate(s, how) for s in step_scores]
    order = rank_order(scores, [truncated == "floor" and is_truncated(s) for s in step_scores])
    return [RankedCandidate(rank=rank, index=i, steps=list(steps[i]) if steps else [],
                            step_scores=list(step_scores[i]), score=scores[i], text=texts[i] if texts else None,
                            truncated=is_truncated(step_scores[i]))
            for rank, i in enumerate(order)]


def rank_order(scores: Sequence[float | None], cut: Sequence[bool] | None = None) -> list[int]:
    """Indices best first: prmkit's one ranking rule (best-of-N, `prmkit score`'s best, eval, search and its
    beams). Chains with a usable score come first (None or NaN last); among them a chain marked `cut` ranks below
    every chain that is not; then the higher score; equal scores keep input order."""
    cut = cut or [False] * len(scores)
    usable = [_usable(score) for score in scores]
    return sorted(range(len(scores)), key=lambda i: (not usable[i], usable[i] and cut[i],
                                                     -scores[i] if usable[i] else 0.0, i))


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
    # a NaN or an infinity (a numeric failure) never earns a reward, as floor_steps rules for single steps
    return float(value) if value is not None and math.isfinite(value) else float(floor)


def floor_steps(step_scores: Sequence[float | None], floor: float = FLOOR) -> list[float]:
    """One RL reward per step, the rule every per-step reward follows (PRMReward.step_rewards, RemotePRMReward's,
    ProcessGRPOTrainer and the verl reward manager): a step the PRM did not read (None: cut by max_length or the
    size limits) or could not score (NaN or infinite: a numeric failure, which `prmkit serve` sends as null) gets
    the floor. One such number among a group's step rewards would make every advantage of the group NaN."""
    return [float(s) if s is not None and math.isfinite(s) else float(floor) for s in step_scores]


def log_truncated_share(log_metric, name: str, step_scores: Sequence[Sequence[float | None] | None]) -> None:
    """Report through TRL's `log_metric` (when the trainer passed one) the share of completions the PRM could not
    read whole, so a policy drifting into runaway lengths shows in the training logs."""
    if callable(log_metric) and step_scores:
        cut = sum(s is not None and is_truncated(s) for s in step_scores)
        log_metric(f"{name}/truncated_share", cut / len(step_scores))
