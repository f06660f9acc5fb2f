"""Solutions and how one is chosen among them. Pure functions over finished solutions; no model here.

The rules themselves (best-of-n, majority, weighted-best-of-n, softmax-weighted, filtered-majority,
majority-of-bests) are prmkit.evaluation.selection's, shared with `prmkit eval`; this module applies them to
Solutions. Every choice is deterministic and follows `rank_order`, the ranking of best-of-N everywhere in prmkit:
equal scores (or equal vote totals) go to the solution that came first, a solution the PRM could not read whole
(cut by max_length) ranks below every solution it read whole, and one with no scored step or a NaN score ranks
last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from prmkit.answers import extract_answer, sample_answer
from prmkit.errors import PRMError
from prmkit.evaluation.selection import blend_confidence, problem_seed, select
from prmkit.scoring.aggregate import aggregate, is_truncated, rank_order
from prmkit.scoring.inputs import split_steps

# A step that commits to a final answer ends a beam. extract_answer alone would not do: it falls back to the
# last number of a text, which almost every arithmetic step has.
FINAL_ANSWER = re.compile(r"\\boxed|\\fbox|####|\banswer\s*(?:is|:)", re.IGNORECASE)


@dataclass
class Solution:
    text: str  # what the policy wrote, the delimiters between steps included
    steps: list[str]  # the text cut at the delimiter (pieces stripped, empty ones dropped)
    step_scores: list[float | None] = field(default_factory=list)
    score: float | None = None  # the aggregate of step_scores; None when no step was scored
    finish_reason: str = "eos"  # of the generation that ended it: eos, length (or stop, for a cut step)
    tokens: int = 0  # tokens generated along this solution's own path
    # The policy's log-prob of those tokens (Sample.logprob summed along the path); None when the backend gave none
    logprob: float | None = None

    @property
    def truncated(self) -> bool:
        return is_truncated(self.step_scores)

    @property
    def answer(self) -> str | None:
        return sample_answer(self.text, self.finish_reason)

    def scored(self, step_scores: Sequence[float | None], how: str) -> "Solution":
        self.step_scores = list(step_scores)
        self.score = aggregate(self.step_scores, how)
        return self

    def row(self) -> dict:
        return {"solution": self.text.strip(), "steps": self.steps, "step_scores": self.step_scores,
                "score": self.score, "truncated": self.truncated, "answer": self.answer,
                "finish_reason": self.finish_reason, "tokens": self.tokens, **self.confidence()}

    @property
    def mean_logprob(self) -> float | None:
        """The policy's log-prob per generated token; None where the backend gave none or nothing was generated."""
        return self.logprob / self.tokens if self.logprob is not None and self.tokens else None

    def confidence(self) -> dict:
        """The policy's own confidence, where known: `logprob` and `mean_logprob` (per generated token), what
        `prmkit eval` compares the PRM's choice with and `confidence_weight` blends into it."""
        if self.logprob is None:
            return {}
        return {"logprob": self.logprob, "mean_logprob": self.mean_logprob}


def from_text(text: str, delimiter: str, *, finish_reason: str = "eos", tokens: int = 0,
              logprob: float | None = None) -> Solution:
    return Solution(text=text, steps=split_steps(text, delimiter), finish_reason=finish_reason, tokens=tokens,
                    logprob=logprob)


def commits_to_answer(step: str) -> bool:
    return bool(FINAL_ANSWER.search(step)) and extract_answer(step) is not None


def ranking(solutions: Sequence[Solution]) -> list[int]:
    """Indices best first, by `rank_order`."""
    return rank_order([s.score for s in solutions], [s.truncated for s in solutions])


def choose_index(rule: str, solutions: Sequence[Solution], *, seed: int = 0, problem: str = "",
                 confidence_weight: float = 0.0, **settings) -> int:
    """The solution `rule` picks ("greedy" is best-of-n over its one sample), with the rule's settings; a seeded
    rule (majority-of-bests) draws from `seed` and the problem's text, so a problem's choice does not depend on
    which batch or process chose it. With a `confidence_weight`, the rule reads each score blended with the
    policy's confidence in that solution (`prmkit.evaluation.selection.blend_confidence`)."""
    scores = [s.score for s in solutions]
    if confidence_weight and len(solutions) > 1:
        try:
            scores = blend_confidence(scores, [s.mean_logprob for s in solutions], confidence_weight)
        except ValueError as error:
            raise PRMError(f"{problem[:60]!r}: {error}") from None
    return select("best-of-n" if rule == "greedy" else rule, scores, [s.answer for s in solutions],
                  [s.truncated for s in solutions], seed=problem_seed(seed, problem), **settings)


def best_of_n(solutions: Sequence[Solution]) -> int:
    return choose_index("best-of-n", solutions)


def majority_vote(solutions: Sequence[Solution]) -> int:
    """The first solution of the most frequent canonical answer (`prmkit.answers.vote`; ties: the answer seen
    first); the first solution when none has an answer."""
    return choose_index("majority", solutions)


def weighted_vote(solutions: Sequence[Solution]) -> int:
    """The canonical answer with the largest sum of PRM scores (an unscored solution adds 0; ties: the answer
    seen first), represented by its best-scored solution. Falls back to best-of-n when no solution has an
    answer."""
    return choose_index("weighted-best-of-n", solutions)
