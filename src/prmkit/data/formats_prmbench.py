"""PRMBench (Song et al., 2025): a benchmark of modified reasoning chains, each with a known error class.

Layout, as the benchmark's loader reads it (ssmisya/PRMBench, mr_eval/tasks/prmtest_classified/task.py, and
docs/data_format.md): one JSON object per line with `idx`, `classification` (the error class: `circular`,
`confidence`, `counterfactual`, `step_contradiction`, `domain_inconsistency`, `redundency` (their spelling),
`missing_condition`, `deception`, `multi_solutions`), `modified_question`, `modified_process` (the steps that are
scored) and `error_steps` (1-based numbers of the wrong steps; empty for `multi_solutions`). The row also holds
`original_question`, `original_process`, `modified_steps`, `reason` and `question`, which the published score
does not read.

The loader keeps one chain per (classification, idx) pair, the first one it meets, and ids it
"{classification}_{idx}"; the converter does the same, so `prmkit eval` scores exactly the chains PRMBench does.
The loader also scores the original process of each `redundency` row as a "correct" class, but that class feeds
neither the overall score nor any leaderboard column, so it is not written.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from prmkit.data.formats_base import ConversionReport, RowContext, check_bool

# A step number the chain was written with ("3. ", "Step 3: "); a space must follow, so "0.5 is ..." stays whole.
STEP_NUMBER = re.compile(r"^(?:step\s*\d+\s*[.:]|\d+\.)\s+", flags=re.IGNORECASE)


def convert_prmbench(rows: Sequence[Any], source: str, *,
                     strip_step_prefix: bool = False) -> tuple[list[dict], ConversionReport]:
    """PRMBench rows -> one record per (classification, idx): prompt = `modified_question`, steps =
    `modified_process`, step k (1-based) negative (0.0) when k is in `error_steps`, else positive (1.0).

    Each record keeps `id` = "{classification}_{idx}" (as PRMBench's evaluator names it), `prmbench_class` = the
    error class, which `prmkit eval` groups PRMScore by, and `error_steps` as written. Steps are kept as written,
    or with a leading "3. " / "Step 3:" removed under `strip_step_prefix` (PRMBench's own PRM adapters strip it
    before scoring; the data files in that repository carry none, its documented example does).
    """
    check_bool("strip_step_prefix", strip_step_prefix)
    report = ConversionReport("prmbench", source, rows_read=len(rows))
    report.choices += [
        "prompt = modified_question, steps = modified_process (the chain PRMBench scores)",
        "steps numbered in error_steps (1-based) -> negative (0.0), every other step -> positive (1.0)",
        "steps kept as written" if not strip_step_prefix
        else "leading step numbers ('3. ', 'Step 3:') stripped (strip_step_prefix=True)",
        "a repeated (classification, idx) pair is skipped: the first is kept, as PRMBench's loader does",
        "original_process is not written: PRMBench's score reads only the modified chain",
    ]
    records, seen = [], set()
    for number, row in enumerate(rows, start=1):
        ctx = RowContext(source, "prmbench", number, row)
        record, reason = _record(ctx, row, strip_step_prefix)
        if record is None:
            report.skip(reason)
        elif (record["prmbench_class"], row["idx"]) in seen:
            report.skip("repeated (classification, idx): the first row is kept")
        else:
            seen.add((record["prmbench_class"], row["idx"]))
            records.append(record)
            report.rows_converted += 1
            report.breakdown[f"classification={record['prmbench_class']}"] += 1
    report.finish(records)
    return records, report


def _record(ctx: RowContext, row: Any, strip_step_prefix: bool) -> tuple[dict | None, str]:
    """The record of one row, or None and the reason it is skipped. A wrong layout raises (see RowContext)."""
    idx = ctx.get(row, "idx", (str, int))
    error_class = ctx.get(row, "classification", str)
    question = ctx.get(row, "modified_question", str)
    steps = ctx.get(row, "modified_process", list)
    error_steps = ctx.get(row, "error_steps", list)
    if not all(isinstance(step, str) for step in steps):
        raise ctx.error("modified_process", "expected a list of strings (one per step)")
    for position, value in enumerate(error_steps):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(f"error_steps[{position}]", f"expected a 1-based step number (int), got {value!r:.40}")
    if not error_class.strip():
        raise ctx.error("classification", "is empty; it names the error class, e.g. 'circular'")
    if strip_step_prefix:
        steps = [STEP_NUMBER.sub("", step.strip()) for step in steps]
    if not question.strip():
        return None, "empty modified_question"
    if not steps:
        return None, "no steps in modified_process"
    if any(not step.strip() for step in steps):
        return None, "empty step in modified_process"
    if any(not 1 <= value <= len(steps) for value in error_steps):
        return None, "error_steps number outside 1..len(modified_process)"
    wrong = set(error_steps)
    idx = str(idx)
    return {"prompt": question, "completions": list(steps),
            "labels": [0.0 if k in wrong else 1.0 for k in range(1, len(steps) + 1)],
            "id": idx if idx.startswith(f"{error_class}_") else f"{error_class}_{idx}",
            "prmbench_class": error_class, "error_steps": list(error_steps)}, ""
