"""`prmkit search-tune`: the selection rules' settings chosen on a validation split, never on held-out problems.

Reads the output of a `prmkit search` over validation problems (a `--budgets` run's rows hold every sample, a
method run's rows its candidates), with the PRM's scores and each candidate graded against the gold answer. Where
every candidate carries the policy's `mean_logprob`, it first chooses the confidence weight
(prmkit.evaluation.selection.CONFIDENCE_WEIGHTS) by within-problem AUROC, the share of one problem's right/wrong
pairs that the blended score orders rightly (ties: the smaller weight, nearer the PRM alone); then, at that weight,
tries every point of each rule's grid (prmkit.evaluation.selection.SETTINGS) at the first `n` candidates of every
problem and keeps the point with the best validation accuracy (ties: the point listed first in the grid). The file
it writes holds every grid point's accuracy and, under `settings`, the chosen values under the option names that
`prmkit search --select-settings FILE` applies.

Held-out problems are read only by `held_out_accuracy`, after every choice is made and written down, so that they
cannot steer a choice; nothing here opens a file it was not given.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from prmkit.errors import PRMError
from prmkit.evaluation.metrics import within_problem_auroc
from prmkit.evaluation.selection import CONFIDENCE_WEIGHTS, SETTINGS, blend_confidence, problem_seed, select
from prmkit.search.options import SAMPLING, SELECTION_FIELDS, SearchOptions

FIELDS = ("score", "answer", "truncated", "correct")  # what a candidate must carry to be chosen and graded


@dataclass(frozen=True)
class Candidates:
    key: str  # the prompt: majority-of-bests seeds a problem's resamples from it, as `prmkit search` does
    scores: list[float | None]
    answers: list[str | None]
    truncated: list[bool]
    correct: list[bool]
    confidence: list[float | None] | None = None  # each candidate's `mean_logprob`; None where one has none

    def blended(self, confidence_weight: float) -> list[float | None]:
        if not confidence_weight:
            return self.scores
        return blend_confidence(self.scores, self.confidence or [None] * len(self.scores), confidence_weight)


def read_candidates(path: str | Path, n: int | None = None) -> tuple[list[Candidates], int | None]:
    """The graded problems of a search output (their first `n` candidates) and the seed the search ran with
    (None when the rows do not say). A row without a gold answer is left out; a row without candidates, or a
    candidate without a score, answer, truncation flag or grade, is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise PRMError(f"{path}: no such file; give the JSONL output of a `prmkit search` over validation problems")
    problems, seeds = [], set()
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise PRMError(f"{path}: line {number} is not JSON; give the output of `prmkit search`") from None
            entries = row.get("samples", row.get("candidates")) if isinstance(row, dict) else None
            if not isinstance(entries, list) or not entries:
                raise PRMError(f"{path}: line {number} has no `samples` or `candidates`; tune on the output of a "
                               "`prmkit search --budgets ...` run or of a sampling method (not greedy, beam, dvts)")
            if isinstance(row.get("options"), dict) and "seed" in row["options"]:
                seeds.add(row["options"]["seed"])
            entries = entries[:n] if n else entries
            missing = sorted({f for e in entries for f in FIELDS if not isinstance(e, dict) or f not in e})
            if missing:
                raise PRMError(f"{path}: line {number}: candidates without {', '.join(missing)}; give the output "
                               "of `prmkit search`, which writes them")
            if row.get("gold_answer") is None or any(e["correct"] is None for e in entries):
                continue
            confidence = [e.get("mean_logprob") for e in entries]
            problems.append(Candidates(key=str(row.get("prompt", "")), scores=[e["score"] for e in entries],
                                    answers=[e["answer"] for e in entries],
                                    truncated=[bool(e["truncated"]) for e in entries],
                                    correct=[bool(e["correct"]) for e in entries],
                                    confidence=None if None in confidence else confidence))
    if not problems:
        raise PRMError(f"{path}: no problem with a gold answer; tuning needs validation problems with gold answers")
    return problems, (seeds.pop() if len(seeds) == 1 else None)


def grid(rule: str) -> list[dict]:
    """Every combination of the rule's grid values (one empty point for a rule without settings)."""
    settings = SETTINGS[rule]
    return [dict(zip(settings, values)) for values in itertools.product(*(s.grid for s in settings.values()))]


def accuracy(rule: str, settings: dict, problems: list[Candidates], seed: int, confidence_weight: float = 0.0) -> dict:
    correct = sum(p.correct[select(rule, p.blended(confidence_weight), p.answers, p.truncated,
                                   seed=problem_seed(seed, p.key), **settings)] for p in problems)
    return {"accuracy": correct / len(problems), "correct": correct, "graded": len(problems)}


def tune_confidence_weight(problems: list[Candidates], path: Path) -> dict:
    """The weight of the policy's confidence with the highest within-problem AUROC on the validation problems, and
    every weight's; weight 0 with a note where some candidate has no `mean_logprob`."""
    if any(p.confidence is None for p in problems):
        return {"chosen": 0.0, "grid": [], "note": "some candidates carry no mean_logprob (a search run with "
                "--no-logprobs, or an older file): the PRM's scores are used alone"}
    points = []
    for weight in CONFIDENCE_WEIGHTS:
        try:
            measured = within_problem_auroc([(p.blended(weight), p.correct) for p in problems])
        except ValueError as error:
            raise PRMError(f"{path}: {error}") from None
        points.append({"confidence_weight": weight, "auroc": measured["auroc"], "pairs": measured["pairs"]})
    best = max(points, key=lambda point: point["auroc"] if point["auroc"] is not None else -1.0)
    return {"chosen": best["confidence_weight"], "criterion": "within-problem AUROC", "grid": points}


def tune_selection(validation: str | Path, *, n: int | None = None, seed: int | None = None,
                   rules: tuple[str, ...] = SAMPLING) -> dict:
    """Each rule's grid scored on the validation output and the best point chosen: the settings file's content."""
    unknown = [r for r in rules if r not in SETTINGS]
    if unknown:
        raise PRMError(f"rules {', '.join(unknown)} are not known; use some of {', '.join(SETTINGS)}")
    if n is not None and n < 1:
        raise PRMError(f"n={n}; give the number of candidates per problem to choose among, e.g. 8")
    problems, search_seed = read_candidates(validation, n)
    seed = seed if seed is not None else search_seed if search_seed is not None else SearchOptions().seed
    weight = tune_confidence_weight(problems, Path(validation))
    # a file without the policy's log-probs sets no weight, so --confidence-weight may still be given beside it
    tuned, settings = {}, {"confidence_weight": weight["chosen"]} if weight["grid"] else {}
    for rule in rules:
        points = [{"settings": point, **accuracy(rule, point, problems, seed, weight["chosen"])}
                  for point in grid(rule)]
        best = max(points, key=lambda point: point["accuracy"])  # max keeps the first of equal ones
        tuned[rule] = {"chosen": best["settings"], "accuracy": best["accuracy"], "grid": points}
        settings.update(best["settings"])
    return {"validation": str(Path(validation).resolve()), "problems": len(problems),
            "candidates": n or "all", "seed": seed, "settings": settings, "confidence_weight": weight,
            "rules": tuned}


def held_out_accuracy(tuned: dict, held_out: str | Path) -> dict:
    """Each tuned rule's accuracy on held-out search output at the settings chosen on validation (read only now,
    after every choice), and, beside it, at the rule's defaults with the PRM alone (confidence weight 0)."""
    if Path(held_out).resolve() == Path(tuned["validation"]).resolve():
        raise PRMError(f"{held_out} is the validation file; report on problems that tuning did not see")
    n = None if tuned["candidates"] == "all" else tuned["candidates"]
    problems, _ = read_candidates(held_out, n)
    defaults = {rule: {name: s.default for name, s in SETTINGS[rule].items()} for rule in tuned["rules"]}
    weight = tuned["settings"].get("confidence_weight", 0.0)
    try:
        return {"path": str(Path(held_out).resolve()), "problems": len(problems),
                "rules": {rule: {"chosen": accuracy(rule, entry["chosen"], problems, tuned["seed"], weight),
                                 "default": accuracy(rule, defaults[rule], problems, tuned["seed"])}
                          for rule, entry in tuned["rules"].items()}}
    except ValueError as error:
        raise PRMError(f"{held_out}: {error}") from None


def read_settings(path: str | Path) -> dict:
    """The chosen settings of a `prmkit search-tune` file, as SearchOptions fields."""
    path = Path(path)
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))["settings"]
    except FileNotFoundError:
        raise PRMError(f"{path}: no such file; write it with `prmkit search-tune VALIDATION.jsonl --out {path}`") \
            from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise PRMError(f"{path}: not a `prmkit search-tune` file (no `settings`); write it with "
                       "`prmkit search-tune`") from None
    unknown = sorted(set(settings) - set(SELECTION_FIELDS)) if isinstance(settings, dict) else ["(not a mapping)"]
    if unknown:
        raise PRMError(f"{path}: settings {', '.join(unknown)} are not selection settings; known: "
                       f"{', '.join(SELECTION_FIELDS)}")
    return settings
