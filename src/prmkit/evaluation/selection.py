"""How one candidate is chosen among a problem's N scored candidates: the selection rules that `prmkit search` and
`prmkit eval` share. Pure and deterministic; no model, no file.

Every rule is `rule(scores, answers, truncated, **settings) -> index`, over one problem's candidates (the settings'
defaults live in SETTINGS only; `select` fills them in):
- `scores`: each candidate's chain score (the aggregate of its step scores); None or NaN when nothing was scored;
- `answers`: each candidate's final answer as written (None: no answer); grouped by `prmkit.answers.vote`, so
  "1,000" and "1000" are one answer;
- `truncated`: whether max_length cut the chain, so the PRM did not read all of it.

Ranking follows `rank_order` everywhere (prmkit's one best-of-N rule): whole chains above cut ones, None/NaN last,
equal scores to the candidate that came first. Equal vote totals go to the answer seen first.

The rules:
- best-of-n: the top of `rank_order`.
- majority: the most frequent answer (self-consistency), represented by its first candidate; the PRM is unused.
- weighted-best-of-n: the answer with the largest sum of scores (an unscored candidate adds 0), represented by its
  best-ranked candidate.
- softmax-weighted: each candidate weighs exp((s - s_max) / vote_temperature), i.e. a softmax over scores / T, and
  the answer with the largest total weight wins. T = 0 is exactly best-of-n and T = inf exactly majority (answer
  for answer); in between, a strong score counts for more than one vote. T is in score units: with probabilities
  from a bce PRM, T = 0.1 makes a 0.1 higher score worth e = 2.7 times the weight. So that no limit rewards what the
  PRM did not read, a cut chain counts one score unit below the lowest whole chain, and an unscored chain one unit
  below the lowest scored one (`softmax_weights`).
- filtered-majority: majority among the top `keep_fraction` of candidates by `rank_order` (at least one);
  keep_fraction = 1.0 is majority and a fraction that keeps one candidate is best-of-n.
- majority-of-bests (MoB, Rakhsha et al. 2025, arXiv 2511.18630): `mob_resamples` bootstrap resamples (with
  replacement) of m = max(1, round(mob_fraction * N)) candidates; best-of-m in each; the most frequent answer among
  those picks (ties: the answer seen first among the candidates), represented by its best-ranked pick. The
  paper chooses m adaptively; here m is a setting, tuned on a validation split like the others. `seed` makes it
  deterministic: pass `problem_seed(run_seed, problem_key)` so a problem's result depends on neither the process
  nor the order problems are read in.

A rule whose vote finds no answer at all falls back to best-of-n (majority: to the first candidate, as ever).

Every rule can also read the policy's own confidence: `blend_confidence` turns each candidate's score into
score x p ** confidence_weight, p the candidate's per-token probability under the policy (exp of its mean
log-prob), before the rule sees it. Weight 0 is the PRM alone and inf the policy's confidence alone; between them
the policy's certainty breaks what the PRM cannot tell apart, and the PRM overrides the policy where it is sure.
`prmkit search-tune` chooses the weight on a validation split (CONFIDENCE_WEIGHTS).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from prmkit.answers import vote
from prmkit.data.problems import derive_seed
from prmkit.scoring.aggregate import rank_order

Scores = Sequence[float | None]
Answers = Sequence[str | None]
Cut = Sequence[bool]


def _usable(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _represent(group: Sequence[int], scores: Scores, truncated: Cut) -> int:
    """The best-ranked candidate of an answer's group."""
    order = rank_order([scores[i] for i in group], [truncated[i] for i in group])
    return group[order[0]]


def best_of_n(scores: Scores, answers: Answers, truncated: Cut) -> int:
    return rank_order(scores, truncated)[0]


def majority(scores: Scores, answers: Answers, truncated: Cut) -> int:
    winners = vote(answers)
    return winners[0][0] if winners else 0


def weighted_best_of_n(scores: Scores, answers: Answers, truncated: Cut) -> int:
    weights = [s if _usable(s) else 0.0 for s in scores]
    winners = vote(answers, weights=weights)
    return _represent(winners[0], scores, truncated) if winners else best_of_n(scores, answers, truncated)


def softmax_weights(scores: Scores, truncated: Cut, vote_temperature: float) -> list[float]:
    """exp((effective score - top effective score) / T) per candidate. A whole chain's effective score is its
    score; a cut chain's is min(its score, the lowest whole chain's) - 1 and an unscored chain's the lowest
    effective score - 1: one unit below, so that as T -> 0 neither outweighs the best whole chain while at T = inf
    each is still one vote. All weights are 1 when no candidate is scored."""
    whole = [s for s, cut in zip(scores, truncated) if _usable(s) and not cut]
    lowest_whole = min(whole, default=math.inf)
    effective = [(min(s, lowest_whole) - 1 if cut else s) if _usable(s) else None for s, cut in zip(scores, truncated)]
    known = [e for e in effective if e is not None]
    if not known or math.isinf(vote_temperature):
        return [1.0] * len(scores)
    floor, top = min(known) - 1, max(known)
    return [math.exp(((e if e is not None else floor) - top) / vote_temperature) for e in effective]


def softmax_weighted(scores: Scores, answers: Answers, truncated: Cut, *, vote_temperature: float) -> int:
    if vote_temperature < 0 or math.isnan(vote_temperature):
        raise ValueError(f"vote_temperature={vote_temperature}; use 0 (best-of-n), a positive number, or inf "
                         "(majority)")
    if vote_temperature == 0:
        return best_of_n(scores, answers, truncated)
    winners = vote(answers, weights=softmax_weights(scores, truncated, vote_temperature))
    return _represent(winners[0], scores, truncated) if winners else best_of_n(scores, answers, truncated)


def filtered_majority(scores: Scores, answers: Answers, truncated: Cut, *, keep_fraction: float) -> int:
    if not 0 < keep_fraction <= 1:
        raise ValueError(f"keep_fraction={keep_fraction}; use a share of candidates in (0, 1], e.g. 0.5")
    order = rank_order(scores, truncated)
    kept = sorted(order[:max(1, math.ceil(keep_fraction * len(order) - 1e-9))])  # vote ties: the answer seen first
    winners = vote([answers[i] for i in kept])
    return kept[winners[0][0]] if winners else order[0]


def majority_of_bests(scores: Scores, answers: Answers, truncated: Cut, *, mob_resamples: int,
                      mob_fraction: float, seed: int) -> int:
    if mob_resamples < 1:
        raise ValueError(f"mob_resamples={mob_resamples}; use 1 or more bootstrap resamples, e.g. 200")
    if not 0 < mob_fraction <= 1:
        raise ValueError(f"mob_fraction={mob_fraction}; use a share of candidates in (0, 1], e.g. 0.5")
    count = len(scores)
    size = max(1, round(mob_fraction * count))
    place = {index: rank for rank, index in enumerate(rank_order(scores, truncated))}
    generator = random.Random(seed)
    picked = [0] * count  # how often each candidate was the best of a resample
    for _ in range(mob_resamples):
        # The best of a resample is its candidate ranked highest overall: rank_order restricted to a subset.
        picked[min(generator.choices(range(count), k=size), key=place.__getitem__)] += 1
    # Picks vote with their counts, so each candidate's answer is made canonical once, not once per resample.
    winners = vote(answers, weights=picked)
    if not winners or not any(picked[i] for i in winners[0]):
        return best_of_n(scores, answers, truncated)
    return min((i for i in winners[0] if picked[i]), key=place.__getitem__)


# What `prmkit search-tune` tries: log(score) moves by weight x the mean log-prob, and a policy's mean log-prob per
# token differs between its samples by about 0.001-0.1, so the grid spans weights at which the policy's share runs
# from a tie-breaker to the whole score.
CONFIDENCE_WEIGHTS = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, math.inf)
SMALLEST_SCORE = 1e-12  # a score of 0 has no log: it stays below every positive score, and p still orders ties


def blend_confidence(scores: Scores, mean_logprobs: Sequence[float | None], confidence_weight: float) -> list:
    """Each score times exp(mean log-prob) ** confidence_weight (in log space, so it neither under- nor overflows);
    at weight inf, exp(mean log-prob) alone. The scores must be probabilities (a bce PRM's). A candidate without a
    score stays unscored; every scored one needs its mean log-prob wherever the weight is not 0 (a ValueError says
    what is missing)."""
    if not confidence_weight >= 0:
        raise ValueError(f"confidence_weight={confidence_weight}; use 0 (the PRM alone), a positive number, or inf "
                         "(the policy's confidence alone)")
    if confidence_weight == 0:
        return list(scores)
    if len(mean_logprobs) != len(scores):
        raise ValueError(f"{len(scores)} scores and {len(mean_logprobs)} mean log-probs: give one of each")
    out = []
    for score, mean in zip(scores, mean_logprobs):
        if not _usable(score):
            out.append(score)
        elif not _usable(mean):
            raise ValueError("confidence_weight needs the policy's mean log-prob of every scored candidate "
                             "(`mean_logprob`, written by `prmkit search` unless --no-logprobs); set it to 0 to "
                             "choose by the PRM alone")
        elif not 0 <= score <= 1:
            raise ValueError(f"a chain score of {score} is not a probability: confidence_weight multiplies "
                             "probabilities (a bce PRM's scores); set it to 0 for this PRM")
        elif math.isinf(confidence_weight):
            out.append(math.exp(mean))
        else:
            out.append(math.exp(math.log(max(score, SMALLEST_SCORE)) + confidence_weight * mean))
    return out


def problem_seed(seed: int, key) -> int:
    """A problem's own seed for majority-of-bests, from the run's seed and something that names the problem (its
    row number or id), never from its position in a run."""
    return derive_seed(seed, "selection", key)


Rule = Callable[..., int]
RULES: dict[str, Rule] = {
    "majority": majority,
    "best-of-n": best_of_n,
    "weighted-best-of-n": weighted_best_of_n,
    "softmax-weighted": softmax_weighted,
    "filtered-majority": filtered_majority,
    "majority-of-bests": majority_of_bests,
}


@dataclass(frozen=True)
class Setting:
    default: float | int
    grid: tuple  # what `prmkit search tune` tries on a validation split
    help: str


SETTINGS: dict[str, dict[str, Setting]] = {
    "majority": {},
    "best-of-n": {},
    "weighted-best-of-n": {},
    "softmax-weighted": {"vote_temperature": Setting(
        0.1, (0.01, 0.03, 0.1, 0.3, 1.0, 3.0),
        "softmax temperature over scores, in score units: 0 is best-of-n, inf is majority")},
    "filtered-majority": {"keep_fraction": Setting(
        0.5, (0.125, 0.25, 0.5, 0.75, 1.0), "share of candidates, best by PRM score first, that vote")},
    "majority-of-bests": {
        "mob_fraction": Setting(0.5, (0.25, 0.5, 0.75), "bootstrap resample size as a share of N"),
        "mob_resamples": Setting(200, (200,), "bootstrap resamples; more only lowers the noise of the mode")},
}
SEEDED = ("majority-of-bests",)  # the rules that take a `seed`


def check_settings(rule: str, settings: dict) -> None:
    """A rule name and settings the rule knows, or a ValueError naming what is wrong and the fix."""
    if rule not in RULES:
        raise ValueError(f"selection rule {rule!r} is not known; use one of {', '.join(RULES)}")
    unknown = sorted(set(settings) - set(SETTINGS[rule]))
    if unknown:
        known = ", ".join(SETTINGS[rule]) or "none"
        raise ValueError(f"{rule} has no setting {', '.join(unknown)}; its settings: {known}")


def select(rule: str, scores: Scores, answers: Answers, truncated: Cut | None = None, *, seed: int = 0,
           **settings) -> int:
    """The index `rule` picks, with its settings (defaults from SETTINGS); `seed` reaches the seeded rules only,
    so callers can pass a problem's seed to every rule."""
    check_settings(rule, settings)
    if not (len(scores) == len(answers) and (truncated is None or len(truncated) == len(scores))):
        raise ValueError(f"{len(scores)} scores, {len(answers)} answers and "
                         f"{len(truncated) if truncated is not None else len(scores)} truncation flags: give one "
                         "of each per candidate")
    if not scores:
        raise ValueError("no candidates to choose from")
    values = {name: setting.default for name, setting in SETTINGS[rule].items()} | settings
    if rule in SEEDED:
        values["seed"] = seed
    return RULES[rule](scores, answers, truncated if truncated is not None else [False] * len(scores), **values)

