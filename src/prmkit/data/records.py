"""The record contract: `{"prompt": str, "completions": [str, ...], "labels": [...]}`.

Labels are normalised to floats in [0, 1] or None (unlabelled: the step is read by the model but not trained
on). Accepted inputs: bool, 0/1, floats in [0, 1] (soft labels) and -1/0/+1 (PRM800K ratings, where the neutral
0 follows `neutral_label`). Every problem names the file, the row, the field and the fix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence, Union

from prmkit.errors import PRMError

LabelScheme = Literal["auto", "binary", "ternary"]
NeutralPolicy = Literal["positive", "negative", "ignore"]
NEUTRAL_VALUES: dict[str, float | None] = {"positive": 1.0, "negative": 0.0, "ignore": None}
Separator = Union[str, "re.Pattern[str]", None]  # where a solution's text is cut into a record's steps
# JSON can spell half of a UTF-16 pair ("\ud83d" alone); Python keeps it in the str, and tokenizers reject it.
UNPAIRED_SURROGATE = ("holds an unpaired UTF-16 surrogate (a JSON escape such as \\ud83d without its partner); "
                      "fix the text encoding of this row")


@dataclass
class RecordProblem:
    row: int  # 1-based, as a user counts lines
    field: str
    message: str

    def render(self, source: str) -> str:
        return f"{source}: row {self.row}, field '{self.field}': {self.message}"


@dataclass
class ValidationReport:
    source: str
    rows_read: int = 0
    rows_kept: int = 0
    scheme: str = "binary"
    problems: list[RecordProblem] = field(default_factory=list)

    @property
    def rows_skipped(self) -> int:
        return self.rows_read - self.rows_kept


def detect_scheme(rows: Iterable[dict]) -> Literal["binary", "ternary"]:
    """Ternary (-1/0/+1) as soon as any label in the file is -1; one rule for the whole file, so a 0 never
    means 'wrong' in one row and 'neutral' in the next."""
    for row in rows:
        labels = row.get("labels") if isinstance(row, dict) else None
        if isinstance(labels, list) and any(_is_number(x) and not isinstance(x, bool) and x == -1 for x in labels):
            return "ternary"
    return "binary"


def normalise_label(value: Any, scheme: str, neutral: NeutralPolicy) -> float | None:
    """One raw label -> float in [0, 1] or None; raises ValueError with the fix."""
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not _is_number(value):
        raise ValueError(f"label {_short(value)} is a {type(value).__name__}; use true/false, 0/1, a float in [0, 1], "
                         "-1/0/+1, or null for an unlabelled step")
    try:
        value = float(value)
    except OverflowError:  # an int beyond the float range (JSON allows any number of digits)
        raise ValueError(f"label {_short(value)} is far outside [0, 1]; use 0/1, a probability, or -1/0/+1 "
                         "ratings") from None
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"label {value} is not a finite number; use a value in [0, 1] or null")
    if scheme == "ternary":
        if value not in (-1.0, 0.0, 1.0):
            raise ValueError(f"label {value:g} in a file with -1/0/+1 ratings; every label must then be -1, 0 or +1")
        if value == 0.0:
            return NEUTRAL_VALUES[neutral]
        return 1.0 if value > 0 else 0.0
    if value == -1.0:  # only reached when the scheme was given or inherited: "auto" reads a -1 as ternary
        raise ValueError("label -1 is a -1/0/+1 rating, but these labels are read as binary (0 = wrong, the "
                         "scheme given or the training data's); read them as ratings with the label scheme "
                         "'ternary' (data.label_scheme=ternary, --label-scheme ternary), or relabel with 0/1")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"label {value:g} is outside [0, 1]; use 0/1, a probability, or -1/0/+1 ratings")
    return value


def validate_record(row: Any, row_number: int, scheme: str, neutral: NeutralPolicy) -> dict:
    """Return the normalised record or raise RecordInvalid listing every problem of this row."""
    problems: list[RecordProblem] = []

    def problem(field_name: str, message: str) -> None:
        problems.append(RecordProblem(row_number, field_name, message))

    if not isinstance(row, dict):
        raise RecordInvalid([RecordProblem(row_number, "<row>", f"expected an object, got {type(row).__name__}")])
    for key in ("prompt", "completions", "labels"):
        if key not in row:
            problem(key, f"missing; each row needs 'prompt', 'completions' and 'labels' "
                         f"(keys here: {_short(sorted(map(str, row)))})")
    if problems:
        raise RecordInvalid(problems)

    prompt, completions, labels = row["prompt"], row["completions"], row["labels"]
    if not isinstance(prompt, str):
        problem("prompt", f"expected a string, got {type(prompt).__name__}")
    elif not prompt.strip():
        problem("prompt", "is empty; give the problem text")
    elif not _is_unicode(prompt):
        problem("prompt", UNPAIRED_SURROGATE)
    if not isinstance(completions, list) or not all(isinstance(c, str) for c in completions):
        problem("completions", "expected a list of strings (one per step)")
        completions = None
    elif not completions:
        problem("completions", "is empty; a chain needs at least one step")
    else:
        for i, step in enumerate(completions):
            if not step.strip():
                problem(f"completions[{i}]", "is an empty step; remove it (and its label) or give its text")
            elif not _is_unicode(step):
                problem(f"completions[{i}]", UNPAIRED_SURROGATE)
    normalised: list[float | None] = []
    if not isinstance(labels, list):
        problem("labels", f"expected a list (one label per step), got {type(labels).__name__}")
    else:
        if completions is not None and len(labels) != len(completions):
            problem("labels", f"has {len(labels)} labels for {len(completions)} steps; give one label per step")
        for i, value in enumerate(labels):
            try:
                normalised.append(normalise_label(value, scheme, neutral))
            except ValueError as err:
                problem(f"labels[{i}]", str(err))
    if problems:
        raise RecordInvalid(problems)
    return {**row, "labels": normalised}


class RecordInvalid(Exception):
    def __init__(self, problems: list[RecordProblem]):
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


def validate_records(rows: list, source: str, *, scheme: LabelScheme = "auto", neutral: NeutralPolicy = "positive",
                     skip_invalid: bool = False, max_reported: int = 20,
                     row_numbers: Sequence[int] | None = None) -> tuple[list[dict], ValidationReport]:
    """Validate every row. Without `skip_invalid` any invalid row raises PRMError listing the first problems
    (all of them counted); with it, invalid rows are dropped and counted in the report. Problems name
    `row_numbers[i]` for rows[i] (the file's numbering, from `prmkit.data.rows`), else i + 1."""
    resolved = detect_scheme(rows) if scheme == "auto" else scheme
    report = ValidationReport(source=source, rows_read=len(rows), scheme=resolved)
    kept = []
    for index, row in enumerate(rows):
        try:
            kept.append(validate_record(row, row_numbers[index] if row_numbers else index + 1, resolved, neutral))
        except RecordInvalid as err:
            report.problems.extend(err.problems)
    report.rows_kept = len(kept)
    if report.problems and not skip_invalid:
        raise PRMError(format_problems(report, max_reported)
                       + "\nFix these rows, or set data.skip_invalid=true to drop invalid rows and count them.")
    return kept, report


def split_steps(text: str, separator: Separator) -> list[str]:
    """Cut a raw completion into steps: at a literal separator string, or at every match of a compiled regex.
    Pieces are stripped and empty ones dropped, so "a\\n\\n\\nb\\n\\n" gives ["a", "b"], as training steps were
    written; no separator (or "") keeps the whole text as one step."""
    if isinstance(separator, re.Pattern):
        pieces = separator.split(text)
    elif separator:
        pieces = text.split(separator)
    else:
        pieces = [text]
    return [piece.strip() for piece in pieces if piece and piece.strip()]


def format_problems(report: ValidationReport, max_reported: int = 20) -> str:
    bad_rows = len({p.row for p in report.problems})
    lines = [f"{report.source}: {bad_rows} of {report.rows_read} rows are invalid:"]
    lines += ["  " + p.render(report.source) for p in report.problems[:max_reported]]
    if len(report.problems) > max_reported:
        lines.append(f"  ... and {len(report.problems) - max_reported} more problems")
    return "\n".join(lines)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, complex)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value: Any, limit: int = 80) -> str:
    """repr for an error message, cut so a huge value cannot bury the message."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for Python's int-to-str limit
        return f"<a {type(value).__name__} too long to show>"
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"
