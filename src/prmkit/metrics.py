"""Step-level metrics on scores and labels (numpy in, plain floats out)."""

from __future__ import annotations

import numpy as np


def auroc(scores, labels) -> float | None:
    """Area under the ROC curve for binary labels (Mann-Whitney U, ties counted half); None with one class only."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    # average ranks over tied scores
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    for start, count in zip(first, counts):
        ranks[order[start:start + count]] = start + (count + 1) / 2.0
    rank_sum = ranks[labels].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def step_metrics(scores, labels, threshold: float = 0.5) -> dict[str, float | int | None]:
    """Metrics over labelled steps: labels may be soft; they are binarised at 0.5 for accuracy and AUROC."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if scores.size == 0:
        return {"n_steps": 0, "accuracy": None, "auroc": None, "mse": None, "positive_rate": None}
    hard = labels >= 0.5
    predicted = scores >= threshold
    return {
        "n_steps": int(scores.size),
        "accuracy": float((predicted == hard).mean()),
        "auroc": auroc(scores, hard),
        "mse": float(((scores - labels) ** 2).mean()),
        "positive_rate": float(hard.mean()),
    }
