"""What every format converter shares: the conversion report and checked access to a source row's fields.

A converter turns source rows into records in the contract form with labels already normalised (floats in
[0, 1] or None), so the written file needs no label policy to be read back. Content problems of one row (a tag
that does not line up, an out-of-range index) skip that row and count the reason; a wrong layout (a missing
field, a wrong type) raises PRMError naming the file, the row, the field and the fix.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from prmkit.data.records import NEUTRAL_VALUES, NeutralPolicy
from prmkit.data.stats import count_labels
from prmkit.errors import PRMError

HUMAN_VALUES: dict[str, float | None] = {"positive": 1.0, "unlabelled": None}


@dataclass
class ConversionReport:
    """What a conversion read, wrote, skipped (with reasons) and decided.
    Every row read is converted or skipped: rows_read == rows_converted + rows_skipped."""
    source_format: str
    source: str
    rows_read: int = 0
    rows_converted: int = 0  # source rows that went into a written record
    rows_written: int = 0  # records written; a source row may give several (math-aps) or share one (prm800k-stepwise)
    skipped: Counter = field(default_factory=Counter)  # reason -> source rows not written
    discarded: Counter = field(default_factory=Counter)  # parts of source rows left out on purpose
    breakdown: Counter = field(default_factory=Counter)  # counts for information, e.g. finish_reason=give_up
    choices: list[str] = field(default_factory=list)
    label_counts: Counter = field(default_factory=Counter)  # positive / negative / soft / unlabelled steps
    out_path: str | None = None

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    def skip(self, reason: str, rows: int = 1) -> None:
        self.skipped[reason] += rows

    def finish(self, records: list[dict]) -> None:
        """Count labels and check that no source row went missing."""
        self.rows_written = len(records)
        self.label_counts = count_labels(records)
        assert self.rows_read == self.rows_converted + self.rows_skipped, (
            f"{self.source_format}: {self.rows_read} rows read but {self.rows_converted} converted "
            f"+ {self.rows_skipped} skipped")

    def to_dict(self) -> dict:
        return {"source_format": self.source_format, "source": self.source, "out_path": self.out_path,
                "rows_read": self.rows_read, "rows_converted": self.rows_converted,
                "rows_skipped": self.rows_skipped, "rows_written": self.rows_written,
                "skipped": dict(+self.skipped), "discarded": dict(+self.discarded),
                "breakdown": dict(+self.breakdown),
                "label_counts": dict(self.label_counts), "choices": list(self.choices)}

    def summary(self) -> str:
        target = f" -> {self.out_path}" if self.out_path else ""
        lines = [f"{self.source_format}: {self.source}{target}",
                 f"rows read {self.rows_read}, converted {self.rows_converted}, skipped {self.rows_skipped}; "
                 f"records written {self.rows_written}"]
        for title, counts in (("skipped", +self.skipped), ("discarded", +self.discarded),
                              ("breakdown", +self.breakdown)):
            if counts:  # unary + drops zero counts
                lines.append(f"{title}:")
                lines += [f"  {key}: {value}" for key, value in sorted(counts.items())]
        labels = ", ".join(f"{kind} {self.label_counts.get(kind, 0)}"
                           for kind in ("positive", "negative", "soft", "unlabelled"))
        lines.append(f"step labels: {labels}")
        lines.append("choices:")
        lines += [f"  - {choice}" for choice in self.choices]
        return "\n".join(lines)


def guess_format(row: Any) -> str | None:
    """The source format a row looks like, for error messages that name the right --format."""
    if not isinstance(row, dict):
        return None
    keys = set(row)
    if {"prompt", "completions", "labels"} <= keys:
        return "trl"
    if isinstance(row.get("label"), dict) and "steps" in row["label"]:
        return "prm800k"
    if {"instruction", "responses", "next_response"} <= keys:
        return "prm800k-stepwise"
    if {"input", "label"} <= keys:
        return "math-shepherd"
    if {"problem", "steps", "label"} <= keys:
        return "processbench"
    if {"question", "reasoning_steps"} <= keys:
        return "math-aps"
    if {"modified_process", "error_steps", "classification"} <= keys:
        return "prmbench"
    return None


@dataclass
class RowContext:
    """Where a source row came from, so a layout error names the file, the row, the field and the fix."""
    source: str
    source_format: str
    number: int  # 1-based
    row: Any

    def error(self, path: str, problem: str) -> PRMError:
        guessed = guess_format(self.row)
        if guessed and guessed != self.source_format:
            fix = f"this row looks like '{guessed}' data; convert it with format '{guessed}'"
        else:
            fix = f"check that the file is in the {self.source_format} layout (see prmkit.data.convert)"
        return PRMError(f"{self.source}: row {self.number}, field '{path}': {problem}; {fix}")

    def get(self, obj: Any, path: str, kind: type | tuple[type, ...], *, optional: bool = False,
            name: str | None = None) -> Any:
        """`obj[a][b]...` for the dotted `path`, checked against `kind`; None where optional and absent or null.
        `name` is the field as the user should read it (defaults to `path`)."""
        shown = name or path
        value = obj
        for part in path.split("."):
            if not isinstance(value, dict):
                raise self.error(shown, f"expected an object, got {type(value).__name__}")
            value = value.get(part)
        if value is None and optional:
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if value is None or not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            names = " or ".join(k.__name__ for k in kinds)
            got = "nothing (missing or null)" if value is None else f"{type(value).__name__} {_short(value)}"
            raise self.error(shown, f"expected {names}, got {got}")
        return value


def check_choice(name: str, value: Any, allowed: dict | tuple) -> None:
    if value not in allowed:
        raise PRMError(f"option {name}={value!r} is not one of {', '.join(map(repr, allowed))}; pick one of those")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise PRMError(f"option {name}={value!r} must be true or false")


def neutral_choice(neutral: NeutralPolicy) -> str:
    check_choice("neutral", neutral, NEUTRAL_VALUES)
    value = NEUTRAL_VALUES[neutral]
    shown = "unlabelled (shown, not trained on)" if value is None else f"{neutral} ({value})"
    return f"rating +1 -> positive (1.0), -1 -> negative (0.0), neutral rating 0 -> {shown} (neutral={neutral!r})"


def has_label(labels: list[float | None]) -> bool:
    return any(value is not None for value in labels)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
