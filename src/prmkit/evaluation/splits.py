"""Data files as `prmkit eval` splits: each row becomes a chain (prompt, steps, and whatever it carries: step
labels, first error, correctness, answer, PRMBench class, the policy's mean log-prob per token). Raw benchmark
layouts (ProcessBench's problem/steps/label, PRMBench's modified_process) are converted on the fly, and the rows
the conversion skips are counted. Labels are read with one scheme per run (`split_label_scheme`)."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from prmkit.data.formats_base import ConversionReport, guess_format
from prmkit.data.records import detect_scheme, normalise_label
from prmkit.data.rows import Row, RowReader
from prmkit.errors import PRMError
from prmkit.evaluation.processbench import first_error_from_labels
from prmkit.scoring.inputs import parse_row
from prmkit.scoring.scorer import PRMScorer


@dataclass
class Chain:
    prompt: str
    steps: list[str]
    labels: list[float | None] | None = None
    first_error: int | None = None
    correct: bool | None = None
    answer: object = None
    group: str = ""  # chains of one problem (best-of-N)
    title: str = ""
    prmbench_class: str | None = None  # PRMBench's error class (`classification`), e.g. "circular"
    mean_logprob: float | None = None  # the policy's mean log-prob per generated token (`prmkit search` writes it)
    scores: list[float | None] = field(default_factory=list)


@dataclass
class Split:
    name: str
    path: Path
    chains: list[Chain]
    seconds: float = 0.0
    label_scheme: str = "binary"  # how this file's labels were read
    conversion: dict | None = None  # a raw layout's conversion: rows read, converted, skipped (by reason)
    notes: list[str] = field(default_factory=list)  # what the reader decided that the user should know


def load_split(path: str | Path, scorer: PRMScorer, *, limit: int | None = None, name: str | None = None,
               label_scheme: str | None = None) -> Split:
    """Read a data file into chains (`limit` rows evenly spaced, each keeping its row number in the file); a raw
    ProcessBench (or other known) layout is converted first. Labels are read with `label_scheme`, else with the
    run's (see `split_label_scheme`)."""
    path = Path(path)
    numbered, conversion = _converted(evenly_spaced(list(RowReader(path)), limit), path)
    scheme, notes = split_label_scheme([row.value for row in numbered], path, scorer.metadata,
                                       label_scheme, converted=conversion is not None)
    chains: list[Chain] = []
    for number, row in ((r.number, r.value) for r in numbered):
        where = f"{path}: row {number}"
        parsed = parse_row(row, where, scorer.metadata.separator)
        if parsed.kind == "candidates":
            chains += _candidate_chains(row, parsed, where, number)
            continue
        labels = _labels(row, where, scheme, scorer.metadata.neutral_label, len(parsed.steps[0]))
        first_error = row.get("first_error")
        if first_error is None and labels is not None:
            first_error = first_error_from_labels(labels)
        correct = row.get("correct", row.get("final_answer_correct"))
        chains.append(Chain(parsed.prompt, parsed.steps[0], labels, first_error,
                            None if correct is None else bool(correct), row.get("answer"), group=parsed.prompt,
                            title=str(row.get("id", f"row {number}")), prmbench_class=_prmbench_class(row, where),
                            mean_logprob=_mean_logprob(row.get("mean_logprob"), f"{where}, field 'mean_logprob'")))
    counts = None if conversion is None else {
        key: value for key, value in conversion.to_dict().items()
        if key in ("source_format", "rows_read", "rows_converted", "rows_skipped", "skipped")}
    return Split(name or path.stem, path, chains, label_scheme=scheme, notes=notes, conversion=counts)


def chain_lengths(scorer: PRMScorer, chains: list[Chain]) -> list[int]:
    """The tokens each chain takes with every step kept: the max_length that would score all of it."""
    return [len(scorer.tokenize(c.prompt, c.steps, max_length=sys.maxsize).input_ids) for c in chains]


def split_label_scheme(rows: list, path: Path, metadata, given: str | None, *,
                       converted: bool = False) -> tuple[str, list[str]]:
    """The scheme a file's labels are read with, and a note when that reading is a guess. One rule per run, so a
    0 means here what it meant in training: the scheme given (`--label-scheme`), else the run's own
    (`metadata.label_scheme`, resolved from its training data); `auto`, or a run that recorded none, detects
    it per file. Rows converted from a raw benchmark layout hold normalised labels and are always binary."""
    if converted:
        return "binary", []
    wanted = given or metadata.label_scheme or "auto"
    detected = detect_scheme(rows)
    if wanted == "auto":
        return detected, []
    notes = []
    has_zero = any(isinstance(row, dict) and isinstance(row.get("labels"), list)
                   and any(label == 0 and not isinstance(label, bool) for label in row["labels"]) for row in rows)
    if given is None and wanted == "ternary" and detected == "binary" and has_zero:
        notes.append(f"{path}: no label is -1, and the run was trained on -1/0/+1 ratings, so a 0 label is read "
                     f"as a neutral rating ({metadata.neutral_label}); if 0 means a wrong step in this file "
                     "(e.g. one written by prmkit data convert), pass --label-scheme binary")
    return wanted, notes


def _converted(rows: list[Row], path: Path) -> tuple[list[Row], ConversionReport | None]:
    """Rows in a known raw layout (ProcessBench's problem/steps/label) become records, with the conversion's
    report (None for rows that are records already). A conversion that keeps one record per row keeps the row
    numbers; one that merges or skips rows numbers the records in order."""
    first = rows[0].value if rows else None
    source_format = guess_format(first) if isinstance(first, dict) and "prompt" not in first else None
    if not source_format or source_format == "trl":
        return rows, None
    from prmkit.data.convert import convert_rows

    records, report = convert_rows(source_format, [row.value for row in rows], str(path))
    if len(records) == len(rows):
        return [Row(row.number, record) for row, record in zip(rows, records)], report
    return [Row(index + 1, record) for index, record in enumerate(records)], report


def evenly_spaced(rows: list, limit: int | None) -> list:
    """`limit` rows spread evenly through the file, first row included: benchmark files are often sorted (by
    source, or errors first), and a head would not keep their mix. Rows of one problem may be split apart."""
    if limit is None or limit >= len(rows):
        return rows
    if limit < 1:
        raise PRMError(f"limit={limit}; use a positive number of rows")
    return [rows[i * len(rows) // limit] for i in range(limit)]


def _labels(row: dict, where: str, scheme: str, neutral: str, n_steps: int) -> list[float | None] | None:
    labels = row.get("labels")
    if labels is None:
        return None
    if not isinstance(labels, list) or len(labels) != n_steps:
        raise PRMError(f"{where}, field 'labels': expected a list of {n_steps} labels (one per step), "
                       f"got {labels!r:.60}")
    try:
        return [normalise_label(value, scheme, neutral) for value in labels]
    except ValueError as err:
        raise PRMError(f"{where}, field 'labels': {err}") from None


def _prmbench_class(row: dict, where: str) -> str | None:
    value = row.get("prmbench_class")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise PRMError(f"{where}, field 'prmbench_class': expected PRMBench's error class as a string, e.g. "
                       f"'circular', got {value!r:.60}; convert PRMBench rows with `prmkit data convert --from "
                       "prmbench`")
    return value


def _mean_logprob(value, where: str) -> float | None:
    """A sample's mean log-prob per token: a number that is not NaN (a log-prob is at most 0), or null."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value > 0:
        raise PRMError(f"{where}: expected the policy's mean log-prob per token, a number <= 0 (or null when "
                       f"unknown), got {value!r:.60}; write it as `prmkit search` does (logprob / tokens)")
    return float(value)


def _candidate_chains(row: dict, parsed, where: str, number: int) -> list[Chain]:
    n = len(parsed.steps)
    correct = row.get("correct")
    answers = row.get("answers", row.get("answer"))
    confidence = row.get("mean_logprob")
    for key, value in (("correct", correct), ("answers", answers), ("mean_logprob", confidence)):
        if value is not None and (not isinstance(value, list) or len(value) != n):
            raise PRMError(f"{where}, field '{key}': expected a list with one entry per candidate ({n}), "
                           f"got {value!r:.60}")
    return [Chain(parsed.prompt, steps, correct=None if correct is None else bool(correct[i]),
                  answer=None if answers is None else answers[i], group=f"row {number}",
                  title=f"row {number} candidate {i}",
                  mean_logprob=None if confidence is None else _mean_logprob(
                      confidence[i], f"{where}, field 'mean_logprob[{i}]'"))
            for i, steps in enumerate(parsed.steps)]
