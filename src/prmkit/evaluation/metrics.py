"""Metrics as pure functions (plain sequences or numpy in, plain floats out).

Step metrics compare step scores with step labels; best-of-N metrics ask how often the chain a PRM picks among
several candidates for one problem is correct, beside random choice and majority vote. The ProcessBench
first-error protocol lives in `prmkit.evaluation.processbench`.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from prmkit.answers import vote


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


def roc_curve(scores, labels) -> tuple[list[float], list[float]]:
    """False and true positive rates at every distinct threshold, from (0, 0) to (1, 1); labels are booleans."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    order = np.argsort(-scores, kind="mergesort")
    scores, labels = scores[order], labels[order]
    # one point per distinct score: tied scores pass or fail together
    last_of_run = np.r_[np.flatnonzero(np.diff(scores)), scores.size - 1] if scores.size else np.array([], int)
    tp = np.cumsum(labels)[last_of_run]
    fp = np.cumsum(~labels)[last_of_run]
    n_pos, n_neg = max(int(labels.sum()), 1), max(int((~labels).sum()), 1)
    return [0.0, *(fp / n_neg).tolist()], [0.0, *(tp / n_pos).tolist()]


def precision_recall_f1(predicted, actual) -> dict[str, float | None]:
    """Precision, recall and F1 of boolean predictions against boolean truth (None where undefined)."""
    predicted, actual = np.asarray(predicted, bool), np.asarray(actual, bool)
    tp = int((predicted & actual).sum())
    precision = tp / int(predicted.sum()) if predicted.any() else None
    recall = tp / int(actual.sum()) if actual.any() else None
    if precision is None or recall is None:
        f1 = None
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {"precision": precision, "recall": recall, "f1": f1}


def reliability_bins(scores, labels, bins: int = 10) -> list[dict]:
    """Equal-width bins over [0, 1] (scores clipped into it): count, mean score and mean label per bin.
    The last bin is closed, so a score of exactly 1.0 is counted."""
    scores = np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0)
    labels = np.asarray(labels, dtype=np.float64)
    index = np.minimum((scores * bins).astype(int), bins - 1)
    result = []
    for b in range(bins):
        members = index == b
        count = int(members.sum())
        result.append({"low": b / bins, "high": (b + 1) / bins, "count": count,
                       "mean_score": float(scores[members].mean()) if count else None,
                       "mean_label": float(labels[members].mean()) if count else None})
    return result


def expected_calibration_error(scores, labels, bins: int = 10) -> float | None:
    """Sum over bins of (bin share) * |mean label - mean score|; soft labels count with their value."""
    if len(scores) == 0:
        return None
    total = len(scores)
    return float(sum(b["count"] / total * abs(b["mean_label"] - b["mean_score"])
                     for b in reliability_bins(scores, labels, bins) if b["count"]))


def step_metrics(scores, labels, threshold: float = 0.5) -> dict[str, float | int | None]:
    """Metrics over labelled steps: labels may be soft; they are binarised at 0.5 for the threshold metrics and
    AUROC. Precision/recall/F1 treat a correct step as positive; the `error_*` ones treat a wrong step as
    positive, which is the rarer and more telling class for a PRM."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if scores.size == 0:
        return {"n_steps": 0, "accuracy": None, "auroc": None, "mse": None, "positive_rate": None}
    hard = labels >= 0.5
    predicted = scores >= threshold
    passed = precision_recall_f1(predicted, hard)
    flagged = precision_recall_f1(~predicted, ~hard)
    return {
        "n_steps": int(scores.size),
        "accuracy": float((predicted == hard).mean()),
        "auroc": auroc(scores, hard),
        "mse": float(((scores - labels) ** 2).mean()),
        "positive_rate": float(hard.mean()),
        **passed,
        **{f"error_{key}": value for key, value in flagged.items()},
        "ece": expected_calibration_error(scores, labels),
    }


def choice_accuracy(scores: Sequence[float | None], correct: Sequence[bool],
                    truncated: Sequence[bool] | None = None) -> float:
    """Expected correctness of picking the highest-scoring candidate, by prmkit's ranking rule (`rank_order`): a
    candidate cut by max_length is picked only when every scored candidate was cut, one without a usable score
    (none, or NaN) never; with no usable score at all the pick is random. Ties are broken at random, so a tie counts
    the mean correctness of the tied candidates (a fixed rule would flatter or punish candidate order)."""
    if len(scores) != len(correct):
        raise ValueError(f"{len(scores)} scores for {len(correct)} candidates")
    cut = list(truncated) if truncated is not None else [False] * len(scores)
    usable = [i for i, s in enumerate(scores) if s is not None and not math.isnan(s)]
    if not usable:
        return random_accuracy(correct)
    whole = [i for i in usable if not cut[i]]
    pool = whole or usable
    best = max(scores[i] for i in pool)
    tied = [bool(correct[i]) for i in pool if scores[i] == best]
    return sum(tied) / len(tied)


def random_accuracy(correct: Sequence[bool]) -> float:
    """Expected correctness of a uniformly random pick: the share of correct candidates."""
    return sum(map(bool, correct)) / len(correct)


def majority_accuracy(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """Expected correctness of majority vote over final answers (`prmkit.answers.vote`: equal canonical answers
    vote together, as `prmkit search` counts them), a tie between answers broken at random. An answer's
    correctness is the share of its candidates marked correct; with no answer at all the pick is random."""
    winners = vote(answers)
    if not winners:
        return random_accuracy(correct)
    return sum(sum(bool(correct[i]) for i in group) / len(group) for group in winners) / len(winners)


def weighted_vote_accuracy(scores: Sequence[float | None], answers: Sequence[str | None], correct: Sequence[bool],
                           truncated: Sequence[bool] | None = None) -> float:
    """Expected correctness of weighted best-of-N as `prmkit search` chooses it: the answer whose candidates' PRM
    scores sum highest (an unscored candidate adds 0), represented by its best candidate by `choice_accuracy`'s
    rule; a tie between answers is broken at random. With no answer at all it is best-of-N."""
    weights = [0.0 if s is None or math.isnan(s) else float(s) for s in scores]
    winners = vote(answers, weights=weights)
    if not winners:
        return choice_accuracy(scores, correct, truncated)
    cut = list(truncated) if truncated is not None else [False] * len(scores)
    return sum(choice_accuracy([scores[i] for i in group], [correct[i] for i in group], [cut[i] for i in group])
               for group in winners) / len(winners)


def best_of_n_metrics(groups: Sequence[dict], aggregations: Sequence[str]) -> dict:
    """Best-of-N accuracy over problems. Each group: `correct` (list of bool), `scores` ({aggregation: list of
    chain scores}), optional `answers` and `confidence` (the policy's mean log-prob per token of each candidate).
    Majority vote is reported only when every group has answers, the policy's confidence only when every group
    has it."""
    if not groups:
        return {"n_problems": 0}
    result: dict = {
        "n_problems": len(groups),
        "mean_candidates": float(np.mean([len(g["correct"]) for g in groups])),
        "random": float(np.mean([random_accuracy(g["correct"]) for g in groups])),
        "oracle": float(np.mean([any(g["correct"]) for g in groups])),
    }
    if all(g.get("answers") is not None for g in groups):
        result["majority_vote"] = float(np.mean([majority_accuracy(g["answers"], g["correct"]) for g in groups]))
    else:
        result["majority_vote"] = None
        result["note"] = "majority vote skipped: the candidates have no 'answer'"
    result["prm"] = {how: float(np.mean([choice_accuracy(g["scores"][how], g["correct"], g.get("truncated"))
                                         for g in groups]))
                     for how in aggregations}
    if all(g.get("confidence") is not None for g in groups):
        result["policy_confidence"] = float(np.mean([choice_accuracy(g["confidence"], g["correct"])
                                                     for g in groups]))
    return result


def within_problem_auroc(groups: Sequence[tuple[Sequence[float | None], Sequence[bool]]]) -> dict:
    """How often a PRM scores a right candidate above a wrong candidate of the SAME problem (ties count half): what
    best-of-N and weighted voting need from a PRM, free of how hard each problem is. A step or chain AUROC pooled
    over problems also rewards knowing which problems are hard; this does not.

    `groups` holds one (scores, correct) pair per problem. A candidate with no usable score (None, NaN) is left
    out of every pair. `auroc` weighs each problem with a right and a wrong candidate equally (the mean of their
    per-problem AUROCs); `auroc_pooled` counts every pair once, so problems with many pairs weigh more.
    `one_sided` counts problems with no pair (all right, all wrong, or unscored)."""
    per_problem: list[float] = []
    pairs = wins = 0.0
    one_sided = 0
    for scores, correct in groups:
        if len(scores) != len(correct):
            raise ValueError(f"{len(scores)} scores for {len(correct)} candidates")
        usable = [(float(s), bool(c)) for s, c in zip(scores, correct) if s is not None and not math.isnan(s)]
        right = [s for s, c in usable if c]
        wrong = [s for s, c in usable if not c]
        if not right or not wrong:
            one_sided += 1
            continue
        problem_wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in right for b in wrong)
        per_problem.append(problem_wins / (len(right) * len(wrong)))
        pairs += len(right) * len(wrong)
        wins += problem_wins
    return {"auroc": float(np.mean(per_problem)) if per_problem else None,
            "auroc_pooled": wins / pairs if pairs else None,
            "problems": len(per_problem), "pairs": int(pairs), "one_sided": one_sided}


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, iterations: int = 10_000, seed: int = 0) -> dict:
    """Mean of a - b over problems with a 95% percentile interval, resampling problems (the pairs) together, so an
    effect shared by both methods on one problem does not widen the interval."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} outcomes paired with {len(b)}")
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if diffs.size == 0:
        return {"difference": None, "low": None, "high": None, "problems": 0}
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, diffs.size, size=(iterations, diffs.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return {"difference": float(diffs.mean()), "low": float(low), "high": float(high), "problems": int(diffs.size)}


def bootstrap_mean(values: Sequence[float], *, iterations: int = 10_000, seed: int = 0) -> dict:
    """Mean over problems (an accuracy, when each value is a problem's expected correctness) with a 95% percentile
    interval from resampling problems: `paired_bootstrap` against zeros, so both draw the same resamples."""
    result = paired_bootstrap(values, [0.0] * len(values), iterations=iterations, seed=seed)
    return {"accuracy": result["difference"], "low": result["low"], "high": result["high"],
            "problems": result["problems"]}
