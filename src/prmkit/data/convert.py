"""Convert PRM data sets into the record contract, as JSONL: `convert(format, in_path, out_path, **options)`.

Formats and their options (defaults first):
  prm800k           raw openai/prm800k rows: neutral="positive"|"negative"|"ignore", human_steps="positive"|
                    "unlabelled", skip_finish_reasons=() (e.g. ("give_up", "bad_problem"))
  prm800k-stepwise  the flattened "stepwise-critic" parquet: neutral, human_steps, attach_answer=True
  math-shepherd     `input` with "ки" step tags and `label` with +/- in their place: strip_step_prefix=False
  processbench      earliest-error benchmark rows: after_error="unlabelled"|"negative"
  math-aps          OmegaPRM search-tree nodes with mc_value: threshold=None (soft labels) or a float
  prmbench          PRMBench rows (modified_process, error_steps, classification): strip_step_prefix=False
  trl               records already in contract form: scheme="auto"|"binary"|"ternary", neutral,
                    skip_invalid=False

Every row read is either converted or counted under a skip reason in the report; every written record passes
`validate_records`. Labels are written normalised (floats in [0, 1] or null), so the output needs no policy.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from prmkit.data.formats_base import ConversionReport, RowContext, check_bool, check_choice
from prmkit.data.formats_montecarlo import convert_math_aps, convert_math_shepherd
from prmkit.data.formats_prm800k import convert_prm800k, convert_prm800k_stepwise
from prmkit.data.formats_prmbench import convert_prmbench
from prmkit.data.records import LabelScheme, NeutralPolicy, validate_records
from prmkit.data.rows import read_rows
from prmkit.errors import PRMError
from prmkit.files import write_jsonl

AFTER_ERROR = {"unlabelled": None, "negative": 0.0}

__all__ = ["ConversionReport", "FORMATS", "convert", "convert_rows", "convert_math_aps", "convert_math_shepherd",
           "convert_prm800k", "convert_prm800k_stepwise", "convert_prmbench", "convert_processbench", "convert_trl",
           "write_jsonl"]


def convert_processbench(rows: Sequence[Any], source: str, *,
                         after_error: str = "unlabelled") -> tuple[list[dict], ConversionReport]:
    """ProcessBench rows: `problem`, `steps`, `label` = index of the earliest wrong step (-1: none wrong).

    Steps before `label` are positive, the `label` step negative, later steps unlabelled (their correctness is
    unknown: the annotators stopped at the first error) or negative with after_error="negative". Steps are kept
    as written. `id`, `generator`, `final_answer_correct` pass through and `first_error` = label, which
    evaluation needs.
    """
    check_choice("after_error", after_error, AFTER_ERROR)
    report = ConversionReport("processbench", source, rows_read=len(rows))
    report.choices += [
        "steps before the first error -> positive (1.0), the first-error step -> negative (0.0)",
        "steps after the first error -> " + ("unlabelled (shown, not trained on)" if after_error == "unlabelled"
                                              else "negative (0.0)") + f" (after_error={after_error!r})",
        "label -1 (no error) -> every step positive; 'first_error' keeps the label for evaluation",
    ]
    records = []
    for number, row in enumerate(rows, start=1):
        ctx = RowContext(source, "processbench", number, row)
        problem, steps = ctx.get(row, "problem", str), ctx.get(row, "steps", list)
        first_error = ctx.get(row, "label", int)
        if not all(isinstance(step, str) for step in steps):
            raise ctx.error("steps", "expected a list of strings (one per step)")
        if not steps:
            report.skip("no steps")
        elif not -1 <= first_error < len(steps):
            report.skip("label is not a step index (-1 or 0..len(steps)-1)")
        elif any(not step.strip() for step in steps):
            report.skip("empty step")
        else:
            records.append(_processbench_record(row, problem, steps, first_error, AFTER_ERROR[after_error]))
            report.rows_converted += 1
            report.breakdown["rows with an error" if first_error >= 0 else "rows without an error"] += 1
    report.finish(records)
    return records, report


def _processbench_record(row: dict, problem: str, steps: list[str], first_error: int,
                         after: float | None) -> dict:
    if first_error < 0:
        labels: list[float | None] = [1.0] * len(steps)
    else:
        labels = [1.0] * first_error + [0.0] + [after] * (len(steps) - first_error - 1)
    record = {"prompt": problem, "completions": list(steps), "labels": labels}
    record.update({key: row[key] for key in ("id", "generator", "final_answer_correct") if key in row})
    record["first_error"] = first_error
    return record


def convert_trl(rows: Sequence[Any], source: str, *, scheme: LabelScheme = "auto", neutral: NeutralPolicy = "positive",
                skip_invalid: bool = False) -> tuple[list[dict], ConversionReport]:
    """Records already in contract form (TRL's stepwise-supervision layout): validated and labels normalised.
    Invalid rows raise PRMError listing them, or with `skip_invalid` are skipped and counted by field."""
    check_choice("scheme", scheme, ("auto", "binary", "ternary"))
    check_choice("neutral", neutral, ("positive", "negative", "ignore"))
    check_bool("skip_invalid", skip_invalid)
    report = ConversionReport("trl", source, rows_read=len(rows))
    records, validation = validate_records(list(rows), source, scheme=scheme, neutral=neutral,
                                           skip_invalid=skip_invalid)
    first_problem: dict[int, str] = {}
    for problem in validation.problems:
        first_problem.setdefault(problem.row, problem.field.split("[")[0])
    for field_name in first_problem.values():
        report.skip(f"invalid '{field_name}' (skip_invalid)")
    report.rows_converted = len(records)
    report.choices.append(f"labels read as {validation.scheme}" + (
        f"; neutral rating 0 -> {neutral} (neutral={neutral!r})" if validation.scheme == "ternary" else ""))
    report.finish(records)
    return records, report


FORMATS: dict[str, Callable[..., tuple[list[dict], ConversionReport]]] = {
    "prm800k": convert_prm800k,
    "prm800k-stepwise": convert_prm800k_stepwise,
    "math-shepherd": convert_math_shepherd,
    "processbench": convert_processbench,
    "math-aps": convert_math_aps,
    "prmbench": convert_prmbench,
    "trl": convert_trl,
}


def format_options(source_format: str) -> dict[str, Any]:
    """The options a format accepts and their defaults."""
    parameters = inspect.signature(_converter(source_format)).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


def convert_rows(source_format: str, rows: Sequence[Any], source: str = "<rows>",
                 **options: Any) -> tuple[list[dict], ConversionReport]:
    """Convert rows already in memory; the records pass `validate_records`."""
    function = _converter(source_format)
    accepted = format_options(source_format)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise PRMError(f"format '{source_format}' has no option {', '.join(map(repr, unknown))}; "
                       f"its options are {', '.join(accepted) or 'none'}")
    records, report = function(rows, source, **options)
    try:
        validate_records(records, f"{source_format} records from {source}", scheme="binary")
    except PRMError as err:  # the converter built a record outside the contract: a bug here, not in the data
        raise AssertionError(f"converter '{source_format}' wrote an invalid record:\n{err}") from None
    return records, report


def convert(source_format: str, in_path: str | os.PathLike, out_path: str | os.PathLike,
            **options: Any) -> ConversionReport:
    """Read `in_path` (jsonl, json, parquet or a datasets folder), convert, write `out_path` as JSONL."""
    _converter(source_format)
    source, target = Path(in_path), Path(out_path)
    if target.exists() and source.exists() and target.resolve() == source.resolve():
        raise PRMError(f"{target}: output would overwrite the input; give another output path")
    rows = read_rows(source)
    if not rows:
        raise PRMError(f"{source}: no rows to convert; check that this is the right file")
    records, report = convert_rows(source_format, rows, str(source), **options)
    write_jsonl(records, target)
    report.out_path = str(target)
    return report


def _converter(source_format: str) -> Callable[..., tuple[list[dict], ConversionReport]]:
    if source_format not in FORMATS:
        raise PRMError(f"unknown data format '{source_format}'; use one of {', '.join(FORMATS)}")
    return FORMATS[source_format]
