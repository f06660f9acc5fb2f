"""The ProcessBench protocol (Zheng et al., 2024): find the earliest wrong step of a chain.

A PRM predicts the first error as the first step whose score is below a threshold (-1: no step is). On a split,
accuracy is measured separately on chains that contain an error (exact index match) and on chains that do not
(prediction -1); the split's F1 is their harmonic mean, and the benchmark reports each split's F1 and their plain
average. The threshold is chosen on one split (the value maximising F1 there) and applied unchanged to the others.

Pure functions on plain lists: scores may hold None for a step that was not scored (cut by max_length); such a
step can never be flagged.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def first_error_from_labels(labels: Sequence[float | None]) -> int:
    """Index of the first step labelled wrong (label < 0.5), -1 when none is; unlabelled steps are skipped."""
    for index, label in enumerate(labels):
        if label is not None and float(label) < 0.5:
            return index
    return -1


def predict_first_error(scores: Sequence[float | None], threshold: float) -> int:
    """The first step scoring below `threshold`, or -1 when every scored step passes."""
    for index, score in enumerate(scores):
        if score is not None and score < threshold:
            return index
    return -1


def first_error_scored(scores: Sequence[float | None], gold: int) -> bool:
    """Whether the PRM saw a chain up to its labelled first error: that step has a score, or for a chain with no
    error (-1), every step has one."""
    if gold < 0:
        return all(score is not None for score in scores)
    return gold < len(scores) and scores[gold] is not None


def harmonic_mean(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def processbench_f1(predicted: Sequence[int], gold: Sequence[int]) -> dict:
    """Accuracy on erroneous chains, on correct chains, and their harmonic mean (None where a kind is absent)."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} chains")
    error_hits = [p == g for p, g in zip(predicted, gold) if g >= 0]
    correct_hits = [p == -1 for p, g in zip(predicted, gold) if g < 0]
    error_acc = sum(error_hits) / len(error_hits) if error_hits else None
    correct_acc = sum(correct_hits) / len(correct_hits) if correct_hits else None
    return {"f1": harmonic_mean(error_acc, correct_acc), "error_accuracy": error_acc,
            "correct_accuracy": correct_acc, "n_error": len(error_hits), "n_correct": len(correct_hits)}


def evaluate_threshold(step_scores: Sequence[Sequence[float | None]], gold: Sequence[int], threshold: float) -> dict:
    predicted = [predict_first_error(scores, threshold) for scores in step_scores]
    return {"threshold": threshold, **processbench_f1(predicted, gold)}


def _hit_intervals(step_scores: Sequence[Sequence[float | None]], gold: Sequence[int]):
    """For each chain, the thresholds t with a correct prediction form one interval lo < t <= hi.

    An erroneous chain (first error g) is right when step g is flagged (s_g < t) and no earlier step is
    (t <= min(s_0..s_{g-1})); a correct chain is right when no step is flagged (t <= min of all scores). A chain
    whose first wrong step has no score can never be right: an empty interval.
    """
    lows, highs, is_error = [], [], []
    for scores, g in zip(step_scores, gold):
        before = [s for s in (scores[:g] if g >= 0 else scores) if s is not None]
        high = min(before) if before else np.inf
        if g >= 0:
            low = scores[g] if g < len(scores) and scores[g] is not None else np.inf
        else:
            low = -np.inf
        lows.append(low)
        highs.append(high)
        is_error.append(g >= 0)
    return np.asarray(lows, float), np.asarray(highs, float), np.asarray(is_error, bool)


def threshold_candidates(values: Sequence[float]) -> np.ndarray:
    """Thresholds that cover every distinct outcome: predictions only change when t crosses a score, so the
    outcome is constant between consecutive distinct scores. Midpoints are returned (they transfer better to
    another split than a value sitting exactly on one score), plus one below and one above all scores."""
    distinct = np.unique(np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float))
    if distinct.size == 0:
        return np.asarray([0.5])
    gap = max(1e-6, 1e-6 * abs(distinct[-1]))
    inner = (distinct[:-1] + distinct[1:]) / 2.0
    return np.concatenate([[distinct[0]], inner, [distinct[-1] + gap]])


def calibrate_threshold(step_scores: Sequence[Sequence[float | None]], gold: Sequence[int],
                        candidates: Sequence[float] | None = None) -> dict:
    """The threshold maximising ProcessBench F1 on these chains, and the F1 there (ties: the lowest threshold).

    Exact over all distinct scores, in O((chains + candidates) log chains): each chain is right on one interval
    of thresholds, so counting right chains at every candidate is two sorted searches.
    """
    if not step_scores:
        raise ValueError("no chains to calibrate a threshold on")
    lows, highs, is_error = _hit_intervals(step_scores, gold)
    if candidates is None:
        candidates = threshold_candidates([s for scores in step_scores for s in scores])
    t = np.asarray(candidates, dtype=float)
    error_hits = _count_in_intervals(lows[is_error], highs[is_error], t)
    correct_hits = _count_in_intervals(lows[~is_error], highs[~is_error], t)
    n_error, n_correct = int(is_error.sum()), int((~is_error).sum())
    error_acc = error_hits / n_error if n_error else None
    correct_acc = correct_hits / n_correct if n_correct else None
    if error_acc is None or correct_acc is None:
        f1 = error_acc if correct_acc is None else correct_acc  # one kind only: maximise its accuracy
    else:
        total = error_acc + correct_acc
        f1 = np.divide(2 * error_acc * correct_acc, total, out=np.zeros_like(total), where=total > 0)
    best = int(np.argmax(f1))
    result = evaluate_threshold(step_scores, gold, float(t[best]))
    assert result["f1"] is None or abs(result["f1"] - float(f1[best])) < 1e-9, "interval count disagrees"
    return result


def _count_in_intervals(lows: np.ndarray, highs: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each t, how many intervals lo < t <= hi contain it."""
    valid = lows < highs
    lows, highs = np.sort(lows[valid]), np.sort(highs[valid])
    started = np.searchsorted(lows, t, side="left")  # lo < t
    ended = np.searchsorted(highs, t, side="left")  # hi < t
    return (started - ended).astype(float)


def average_f1(per_split: dict[str, dict]) -> float | None:
    """The plain mean of the splits' F1, as the ProcessBench paper reports it (None if any split has none)."""
    values = [result.get("f1") for result in per_split.values()]
    if not values or any(v is None for v in values):
        return None
    return float(sum(values) / len(values))
