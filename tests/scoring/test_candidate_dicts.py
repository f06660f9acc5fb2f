"""`prmkit score` on a `prmkit search` output: candidates written as solution dicts are scored by their own
`steps` (written back as for step-list candidates), and a row mixing candidate styles or a dict without `steps` is
an error naming the row and field."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from prmkit.data.rows import Row
from prmkit.errors import PRMError
from prmkit.scoring.inputs import parse_row
from prmkit.scoring.score_file import score_rows
from prmkit.search.select import Solution


def solution(steps: list[str], correct: bool) -> dict:
    return {**Solution(text="\n\n".join(steps), steps=steps, step_scores=[0.5] * len(steps), score=0.5, tokens=4,
                       logprob=-2.0).row(), "correct": correct}


POOL = [solution(["2 + 2 = 4.", "The answer is 4."], True), solution(["2 + 2 = 5.", "The answer is 5."], False),
        solution(["It is 4."], True)]
ROW = {"row": 1, "prompt": "What is 2 + 2?", "gold_answer": "4", **POOL[0], "candidates": POOL,
       "method": "best-of-n"}


class Counting:
    """Just enough of a PRMScorer for `score_rows`: one score per step, the step's length over 100."""

    metadata = SimpleNamespace(separator="\n\n")

    def score_many(self, chains):
        return [[len(step) / 100 for step in steps] for _, steps in chains]


def test_prmkit_score_scores_the_steps_of_search_candidates():
    parsed = parse_row(ROW, "f: row 1", "\n\n")
    assert parsed.kind == "candidates" and parsed.steps == [p["steps"] for p in POOL]
    assert not parsed.split_from_text
    (scored,) = score_rows(Counting(), [Row(1, ROW)], how="min")
    assert scored["step_scores"] == [[0.1, 0.16], [0.1, 0.16], [0.08]]
    assert scored["best"] == 0 and scored["candidates"] == POOL and "candidate_steps" not in scored
    with pytest.raises(PRMError, match=re.escape("f: row 1, field 'candidates[1]': candidates[0] is a dict")):
        parse_row({"prompt": "P", "candidates": [POOL[0], ["a"]]}, "f: row 1", "\n\n")
    with pytest.raises(PRMError, match=re.escape("field 'candidates[0].steps'")):
        parse_row({"prompt": "P", "candidates": [{"solution": "a"}]}, "f: row 1", "\n\n")
