"""The PRMBench protocol (Song et al., 2025): PRMScore = 0.5 * F1(correct steps) + 0.5 * F1(wrong steps).

Source, repository ssmisya/PRMBench: `mr_eval/tasks/prmtest_classified/task.py` (`evaluate_function` and
`eval_on_hallucination_step`), the step labels its PRM adapters hand to it (`mr_eval/models/qwen_prm.py`,
`mr_eval/models/abstract_model.py`: a step is valid when its score is > validity_threshold, 0.5 by default) and
the script that builds the leaderboard, `mr_visualize/eval_res_view/draw_tabs/form_excel_strs.ipynb`
(PRMScore = f1 * 0.5 + negative_f1 * 0.5). What they do:
  - every step of the modified chain counts; a step without a prediction (here: cut by max_length) does not;
  - a correct step judged valid is a true positive, one judged invalid a false negative; a wrong step judged
    valid is a false positive, one judged invalid a true negative;
  - F1(correct) ("f1" there) is the F1 of correct steps as the positive class, F1(wrong) ("negative_f1") the F1
    of wrong steps as the positive class; both are micro: counts are summed over the steps of all chains first;
  - the overall score sums the counts of every chain of every class, multi_solutions included; each class
    sums its own; the leaderboard's dimension columns (simplicity, soundness, sensitivity) are plain means of
    their classes' scores;
  - a model that also emits a redundancy score is judged on that one for redundency and circular chains; a
    prmkit PRM gives one score per step, so its validity judgement counts everywhere, as for the
    single-score PRMs there.

Two cases the source fills with a -1 sentinel are defined here:
  - F1 = 2·hits / (2·hits + false alarms + misses), the harmonic mean of precision and recall. The source
    divides precision and recall, each -1 when undefined, which yields -1 (not 0) when a class has gold steps,
    none of them is found and some other step is taken for one; here that is 0.
  - F1 of a class with no gold step is None: there is nothing to find. A group without wrong steps
    (multi_solutions) then scores its F1(correct) alone, the number the PRMBench leaderboard prints in that
    column (the script's own 0.5/0.5 mix would halve it there, or give 0 through the sentinels).

Pure functions on plain lists, small enough to check by hand; scores may hold None for an unscored step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

DEFAULT_THRESHOLD = 0.5  # PRMBench's validity_threshold
WEIGHTS = (0.5, 0.5)  # (F1 correct, F1 wrong), the paper's w2 and w1

# PRMBench's class names (its spelling, "redundency" included) -> the leaderboard's column, in its order.
CLASSES = {"redundency": "NR", "circular": "NCL", "counterfactual": "ES", "step_contradiction": "SC",
           "domain_inconsistency": "DC", "confidence": "CI", "missing_condition": "PS", "deception": "DR",
           "multi_solutions": "MS"}
DIMENSIONS = {"simplicity": ("redundency", "circular"),
              "soundness": ("counterfactual", "step_contradiction", "domain_inconsistency", "confidence"),
              "sensitivity": ("missing_condition", "deception", "multi_solutions")}


@dataclass
class StepCounts:
    """The confusion counts of one group of chains; a correct step is the positive class."""
    chains: int = 0
    correct_passed: int = 0  # true positives: a correct step judged valid
    correct_flagged: int = 0  # false negatives
    wrong_passed: int = 0  # false positives: a wrong step judged valid
    wrong_flagged: int = 0  # true negatives
    steps_unscored: int = 0  # labelled steps without a score: counted nowhere above

    def add(self, other: StepCounts) -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def count_steps(scores: Sequence[float | None], labels: Sequence[float | None], threshold: float) -> StepCounts:
    """One chain's counts: a step passes when its score is > threshold (strictly, as PRMBench's adapters do);
    a label >= 0.5 marks a correct step. Steps without a label are skipped, steps without a score counted apart."""
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} step labels")
    counts = StepCounts(chains=1)
    for score, label in zip(scores, labels):
        if label is None:
            continue
        if score is None:
            counts.steps_unscored += 1
        elif label >= 0.5:
            if score > threshold:
                counts.correct_passed += 1
            else:
                counts.correct_flagged += 1
        elif score > threshold:
            counts.wrong_passed += 1
        else:
            counts.wrong_flagged += 1
    return counts


def f1_score(hits: int, false_alarms: int, misses: int) -> float | None:
    """2·hits / (2·hits + false alarms + misses); None when the class has no gold member (hits + misses == 0)."""
    if hits + misses == 0:
        return None
    return 2 * hits / (2 * hits + false_alarms + misses)


def prmscore(f1_correct: float | None, f1_wrong: float | None) -> float | None:
    """The weighted F1s; with one of them undefined, the other alone (see the module docstring)."""
    if f1_correct is None or f1_wrong is None:
        return f1_correct if f1_wrong is None else f1_wrong
    return WEIGHTS[0] * f1_correct + WEIGHTS[1] * f1_wrong


def group_metrics(counts: StepCounts) -> dict:
    """PRMScore, both F1s and the counts of one group."""
    f1_correct = f1_score(counts.correct_passed, counts.wrong_passed, counts.correct_flagged)
    f1_wrong = f1_score(counts.wrong_flagged, counts.correct_flagged, counts.wrong_passed)
    return {"prmscore": prmscore(f1_correct, f1_wrong), "f1_correct": f1_correct, "f1_wrong": f1_wrong,
            "chains": counts.chains, "correct_steps": counts.correct_passed + counts.correct_flagged,
            "wrong_steps": counts.wrong_passed + counts.wrong_flagged,
            "correct_passed": counts.correct_passed, "correct_flagged": counts.correct_flagged,
            "wrong_passed": counts.wrong_passed, "wrong_flagged": counts.wrong_flagged,
            "steps_unscored": counts.steps_unscored}


def prmbench_metrics(classes: Sequence[str], step_scores: Sequence[Sequence[float | None]],
                     step_labels: Sequence[Sequence[float | None]], threshold: float = DEFAULT_THRESHOLD) -> dict:
    """PRMBench's scores of these chains: `overall` (every step of every chain), `classes` (per error class, the
    leaderboard's classes first in its order, then any other in name order) and `dimensions` (the mean PRMScore
    of each leaderboard dimension's classes; None unless all of them are present and scored)."""
    if not len(classes) == len(step_scores) == len(step_labels):
        raise ValueError(f"{len(classes)} classes, {len(step_scores)} score lists and {len(step_labels)} label "
                         "lists: one of each per chain")
    overall, per_class = StepCounts(), {}
    for name, scores, labels in zip(classes, step_scores, step_labels):
        counts = count_steps(scores, labels, threshold)
        overall.add(counts)
        per_class.setdefault(name, StepCounts()).add(counts)
    order = [name for name in CLASSES if name in per_class] + sorted(set(per_class) - set(CLASSES))
    by_class = {name: group_metrics(per_class[name]) for name in order}
    dimensions = {}
    for dimension, members in DIMENSIONS.items():
        values = [by_class[m]["prmscore"] if m in by_class else None for m in members]
        dimensions[dimension] = None if None in values else sum(values) / len(values)
    return {"threshold": threshold, "overall": group_metrics(overall), "classes": by_class,
            "dimensions": dimensions}
