"""Metrics over the samples of one problem, which is all that best-of-N ever compares: how often the PRM scores a
right sample above a wrong sample of the same problem (within-problem AUROC), and best-of-N, weighted best-of-N and
majority vote at each N the data allows, each with a bootstrap interval over problems, and the PRM's choosers
against majority vote with paired intervals. A PRM can separate steps across problems (step AUROC) and still
rank the samples of one problem no better than chance; these numbers show it.

A group is one problem's samples in file order, as `evaluate.best_of_n_groups` builds them: `correct`, `answers`
(None when some sample has no answer), `truncated`, `scores` ({aggregation: chain scores}), optionally `key`
(what names the problem; its position otherwise), optionally `confidence` (each sample's mean log-prob per
token under the policy) and optionally `steps_right` (whether step labels call every step of the sample right).
Where every group has `confidence`, the policy's own confidence is a chooser beside the PRM, the baseline a PRM
must beat: its within-problem AUROC on the PRM's pairs, best-of-N by it at each N against majority vote, and the
PRM's best-of-N minus it, paired by problem. At N every problem keeps its first N samples, so N stops at the
smallest group. Random, majority vote, best-of-N and weighted best-of-N are expected correctness
(ties broken at random, as in `metrics.choice_accuracy`); the vote-aware rules of `evaluation.selection` are the
correctness of the sample they pick with their default settings, majority-of-bests seeded per problem. Every
interval is seeded, so a rerun prints the same table.

Where correctness comes from the answers and every group has `steps_right`, `step_label_ceiling` is the
within-problem AUROC of the step labels themselves: the score of a PRM that never misjudges a step. A sample that
reaches a right answer through a wrong step is right by its answer and wrong by its steps, so that figure is below 1
by as much as such samples weigh, and no PRM judged by answers can be expected above it.
"""

from __future__ import annotations

import math
from typing import Sequence

from prmkit.evaluation.metrics import (
    bootstrap_mean,
    choice_accuracy,
    majority_accuracy,
    paired_bootstrap,
    random_accuracy,
    weighted_vote_accuracy,
    within_problem_auroc,
)
from prmkit.evaluation.selection import RULES, SETTINGS, problem_seed, select

DEFAULT_AGGREGATION = "min"  # the chain score that `prmkit score` and `prmkit search` use unless told otherwise
# Resamples per interval. Memory is iterations x problems x 8 bytes per interval; 2000 resamples put the
# interval's ends within about 0.005 of where 10000 would.
BOOTSTRAP_ITERATIONS = 2000
SEED = 0
MAJORITY, RANDOM, ORACLE = "majority vote", "random", "oracle (pass@N)"
BEST, WEIGHTED = "best-of-N", "weighted best-of-N"
CONFIDENCE = "best-of-N by policy confidence"
# The selection rules beside those rows; best-of-n, majority and weighted-best-of-n are the rows above already,
# there as expected correctness rather than one tie-break.
VOTE_RULES = tuple(name for name in RULES if name not in ("best-of-n", "majority", "weighted-best-of-n"))


def n_values(smallest: int) -> list[int]:
    """1, 2, 4, 8, ... up to `smallest`, and `smallest` itself (every sample of the smallest problem)."""
    values, n = [], 1
    while n <= smallest:
        values.append(n)
        n *= 2
    return values if values[-1] == smallest else [*values, smallest]


def problem_outcomes(groups: Sequence[dict], n: int, aggregation: str, rules: Sequence[str] = VOTE_RULES, *,
                     seed: int = SEED) -> dict[str, list[float]]:
    """Per method, each problem's expected correctness when it chooses among the problem's first n samples.
    Majority vote, weighted best-of-N and the selection rules need the samples' answers (a sample without one
    votes for nothing); a group without answers leaves them out."""
    heads = [{"correct": g["correct"][:n], "answers": None if g.get("answers") is None else g["answers"][:n],
              "truncated": (g.get("truncated") or [False] * len(g["correct"]))[:n],
              "scores": g["scores"][aggregation][:n], "seed": problem_seed(seed, g.get("key", index)),
              "confidence": None if g.get("confidence") is None else g["confidence"][:n]}
             for index, g in enumerate(groups)]
    voted = all(h["answers"] is not None for h in heads)
    outcomes = {RANDOM: [random_accuracy(h["correct"]) for h in heads],
                ORACLE: [float(any(h["correct"])) for h in heads]}
    if voted:
        outcomes[MAJORITY] = [majority_accuracy(h["answers"], h["correct"]) for h in heads]
    outcomes[BEST] = [choice_accuracy(h["scores"], h["correct"], h["truncated"]) for h in heads]
    if all(h["confidence"] is not None for h in heads):
        # the policy read every sample whole, so max_length's cuts (the PRM's `truncated`) do not apply
        outcomes[CONFIDENCE] = [choice_accuracy(h["confidence"], h["correct"]) for h in heads]
    if voted:
        outcomes[WEIGHTED] = [weighted_vote_accuracy(h["scores"], h["answers"], h["correct"], h["truncated"])
                              for h in heads]
        for rule in rules:
            outcomes[rule] = [float(bool(h["correct"][select(rule, h["scores"], h["answers"], h["truncated"],
                                                             seed=h["seed"])])) for h in heads]
    return outcomes


def by_n(groups: Sequence[dict], aggregation: str = DEFAULT_AGGREGATION, rules: Sequence[str] = VOTE_RULES, *,
         iterations: int = BOOTSTRAP_ITERATIONS, seed: int = SEED) -> dict:
    """Accuracy of every method at each N with a 95% bootstrap interval (`methods[name][str(N)]`: accuracy, low,
    high, problems), and each PRM chooser minus majority vote at each N with a paired interval over problems
    (`versus_majority["<method> - majority vote"][str(N)]`: difference, low, high, problems). `rules` names
    selection rules (`evaluation.selection.RULES`), run with their default settings (`rule_settings`). Where the
    groups carry the policy's confidence, best-of-N by it is a method and is compared with majority vote, and
    `versus_confidence` holds the PRM's best-of-N minus it."""
    smallest = min(len(g["correct"]) for g in groups)
    ns = n_values(smallest)
    methods: dict[str, dict[str, dict]] = {}
    versus: dict[str, dict[str, dict]] = {}
    versus_confidence: dict[str, dict[str, dict]] = {}
    for n in ns:
        outcomes = problem_outcomes(groups, n, aggregation, rules, seed=seed)
        for name, values in outcomes.items():
            methods.setdefault(name, {})[str(n)] = bootstrap_mean(values, iterations=iterations, seed=seed)
        if MAJORITY in outcomes:
            for name in (BEST, *([CONFIDENCE] if CONFIDENCE in outcomes else []), WEIGHTED, *rules):
                versus.setdefault(f"{name} - {MAJORITY}", {})[str(n)] = paired_bootstrap(
                    outcomes[name], outcomes[MAJORITY], iterations=iterations, seed=seed)
        if CONFIDENCE in outcomes:
            versus_confidence.setdefault(f"{BEST} - {CONFIDENCE}", {})[str(n)] = paired_bootstrap(
                outcomes[BEST], outcomes[CONFIDENCE], iterations=iterations, seed=seed)
    result = {"aggregation": aggregation, "n": ns, "problems": len(groups), "smallest_group": smallest,
              "largest_group": max(len(g["correct"]) for g in groups), "methods": methods,
              "versus_majority": versus, "bootstrap": {"iterations": iterations, "seed": seed, "interval": 0.95},
              "rule_settings": {rule: {name: setting.default for name, setting in SETTINGS[rule].items()}
                                for rule in rules}}
    if versus_confidence:
        result["versus_confidence"] = versus_confidence
    if MAJORITY not in methods:
        result["note"] = ("majority vote, weighted best-of-N and the selection rules skipped: the rows have no "
                          "'answer' to vote with")
    return result


def within_problem_metrics(groups: Sequence[dict], aggregations: Sequence[str], *, correct_from: str,
                           aggregation: str = DEFAULT_AGGREGATION, rules: Sequence[str] = VOTE_RULES,
                           iterations: int = BOOTSTRAP_ITERATIONS, seed: int = SEED) -> dict:
    """The within-problem AUROC of every aggregation's chain score (over all samples of each problem) and the
    methods by N (`by_n`, chain score `aggregation`); `correct_from` says where correctness came from. Where every
    group carries the policy's confidence, `confidence_auroc` is its within-problem AUROC on the pairs the PRM's
    `aggregation` score has; where only some do, `confidence_note` says why there is none."""
    result = {"correct_from": correct_from, "problems": len(groups),
              "auroc": {how: within_problem_auroc([(g["scores"][how], g["correct"]) for g in groups])
                        for how in aggregations},
              "by_n": by_n(groups, aggregation, rules, iterations=iterations, seed=seed)}
    confident = sum(g.get("confidence") is not None for g in groups)
    if confident == len(groups):
        result["confidence_auroc"] = within_problem_auroc(
            [(on_prm_pairs(g["confidence"], g["scores"][aggregation]), g["correct"]) for g in groups])
    elif confident:
        result["confidence_note"] = (
            f"only {confident} of {len(groups)} problems have a mean_logprob on every sample; the policy's "
            "confidence is compared with the PRM on all problems or none")
    return result


def step_label_ceiling(groups: Sequence[dict]) -> dict | None:
    """The within-problem AUROC of each sample scored 1 when its step labels call every step right, else 0, and
    how many right samples have a wrong step; None unless every group has `steps_right` for every sample."""
    if not groups or any(g.get("steps_right") is None or None in g["steps_right"] for g in groups):
        return None
    ceiling = within_problem_auroc([([float(s) for s in g["steps_right"]], g["correct"]) for g in groups])
    right = [s for g in groups for s, c in zip(g["steps_right"], g["correct"]) if c]
    return {**ceiling, "right_samples": len(right), "right_with_a_wrong_step": sum(not s for s in right)}


def on_prm_pairs(confidence: Sequence[float], prm_scores: Sequence[float | None]) -> list[float | None]:
    """The confidence of the samples the PRM scored (None for the others), so both AUROCs count the same pairs."""
    return [None if s is None or math.isnan(s) else c for c, s in zip(confidence, prm_scores)]
