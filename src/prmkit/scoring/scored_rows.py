"""The shape of a scored row, one for every way a row is scored: `prmkit score` writes it and `prmkit serve`
answers with it, so a row gets the same keys (and the same winner) from the file command and the server.

Two row layouts (prmkit.scoring.inputs.parse_row reads them):
  a record     {"prompt", "completions": [step, ...], ...}, or "completion": one raw string cut at the run's
               separator; scored as `step_scores`, `score` (the aggregate) and `truncated` (max_length cut steps:
               their scores are null), plus `steps` when they were cut from a string;
  candidates   {"prompt", "candidates": [str | [step, ...], ...], ...} for best-of-N (in a file, also
               `prmkit search`'s solution dicts, each scored by its own `steps`; a search row's top-level
               `step_scores` and `truncated`, the chosen solution's, give way to these); scored as `step_scores`
               (one list per candidate), `scores` (aggregates), `truncated` (one flag per candidate) and `best` (the
               winner's index, by `rank_candidates`: a cut candidate never wins over one the PRM read whole; null
               when no candidate has a score), plus `candidate_steps` when they were cut from strings.
Every other key of the row is kept.
"""

from __future__ import annotations

import math

from prmkit.scoring.aggregate import aggregate, is_truncated, rank_candidates
from prmkit.scoring.inputs import ParsedRow


def attach_scores(row: dict, parsed: ParsedRow, scores: list[list[float | None]], how: str) -> dict:
    """The input row plus its scores, one list of step scores per chain of `parsed` (see the module docstring)."""
    out = dict(row)
    if parsed.kind == "record":
        if parsed.split_from_text:
            out["steps"] = parsed.steps[0]
        out["step_scores"] = scores[0]
        out["score"] = aggregate(scores[0], how)
        out["truncated"] = is_truncated(scores[0])
        return out
    if parsed.split_from_text:
        out["candidate_steps"] = parsed.steps
    ranked = rank_candidates(scores, how)
    out["step_scores"] = scores
    out["scores"] = [aggregate(s, how) for s in scores]
    out["truncated"] = [is_truncated(s) for s in scores]
    out["best"] = ranked[0].index if ranked[0].score is not None and not math.isnan(ranked[0].score) else None
    return out
