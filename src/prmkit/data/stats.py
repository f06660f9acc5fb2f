"""Look at a data set before training on it: sizes, label mix, token lengths, problems, and a grouped split.

Records are in the contract form with normalised labels (as `load_records` and `convert` return them):
floats in [0, 1] or None.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from prmkit.data.records import LabelScheme, NeutralPolicy, RecordProblem, ValidationReport, validate_records
from prmkit.data.rows import RowReader
from prmkit.errors import PRMError

LABEL_KINDS = ("positive", "negative", "soft", "unlabelled")
NO_LIMIT = 10**9  # a max_length nothing reaches, to measure full lengths with the one tokenization function


def label_kind(value: float | None) -> str:
    if value is None:
        return "unlabelled"
    if value >= 1:
        return "positive"
    if value <= 0:
        return "negative"
    return "soft"


def count_labels(records: Sequence[dict]) -> Counter:
    counts = Counter({kind: 0 for kind in LABEL_KINDS})
    for record in records:
        counts.update(label_kind(value) for value in record["labels"])
    return counts


def dataset_stats(records: Sequence[dict], tokenizer=None, *, separator: str = "\n\n",
                  max_length: int | None = None) -> dict:
    """Rows, steps per row, label mix and share of rows with an error; with a tokenizer also token lengths
    and, with `max_length`, how many rows it would truncate and how many steps it would drop."""
    if max_length is not None and tokenizer is None:
        raise PRMError("max_length needs a tokenizer to measure token lengths; pass the tokenizer too")
    steps = [len(r["completions"]) for r in records]
    with_error = sum(1 for r in records if any(label_kind(v) == "negative" for v in r["labels"]))
    stats: dict[str, Any] = {
        "rows": len(records),
        "steps": sum(steps),
        "steps_per_row": _summary(steps, ("min", "mean", "median", "max")),
        "labels": dict(count_labels(records)),
        "rows_with_error": with_error,
        "error_share": with_error / len(records) if records else None,
    }
    if tokenizer is not None:
        stats.update(_token_stats(records, tokenizer, separator, max_length))
    return stats


def _token_stats(records: Sequence[dict], tokenizer, separator: str, max_length: int | None) -> dict:
    from prmkit.tokenize import tokenize_chain

    lengths, truncated, dropped, labelled_dropped = [], 0, 0, 0
    for record in records:
        full = tokenize_chain(tokenizer, record["prompt"], record["completions"], record["labels"],
                              separator=separator, max_length=NO_LIMIT)
        lengths.append(len(full.input_ids))
        if max_length is not None and len(full.input_ids) > max_length:
            truncated += 1
            cut = tokenize_chain(tokenizer, record["prompt"], record["completions"], record["labels"],
                                 separator=separator, max_length=max_length)
            dropped += cut.steps_dropped
            labelled_dropped += sum(1 for v in record["labels"][cut.steps_kept:] if v is not None)
    out: dict[str, Any] = {"separator": separator,
                           "tokens": _summary(lengths, ("min", "mean", "p50", "p95", "max"))}
    if max_length is not None:
        total_steps = sum(len(r["completions"]) for r in records)
        out.update({"max_length": max_length, "rows_truncated": truncated,
                    "truncated_share": truncated / len(records) if records else None,
                    "steps_dropped": dropped, "steps_dropped_share": dropped / total_steps if total_steps else None,
                    "labelled_steps_dropped": labelled_dropped})
    return out


def _summary(values: Sequence[float], keys: Sequence[str]) -> dict[str, float | None]:
    if not values:
        return {key: None for key in keys}
    ordered = sorted(values)
    compute = {"min": lambda: ordered[0], "max": lambda: ordered[-1], "mean": lambda: statistics.fmean(ordered),
               "median": lambda: statistics.median(ordered), "p50": lambda: _percentile(ordered, 50),
               "p95": lambda: _percentile(ordered, 95)}
    return {key: compute[key]() for key in keys}


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), so p50 equals the median."""
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def validate_file(path: str | Path, *, scheme: LabelScheme = "auto",
                  neutral: NeutralPolicy = "positive") -> tuple[ValidationReport, list[str]]:
    """Every problem of a data file, one line each with its row number (not only the first). A .jsonl line that
    is not valid JSON is a problem of that row too; rows are numbered as every command numbers them (see
    `prmkit.data.rows`)."""
    source = str(path)
    rows = list(RowReader(path, lenient=True))
    unreadable = [RecordProblem(row.number, "<line>", row.problem) for row in rows if row.problem]
    readable = [row for row in rows if not row.problem]
    _, report = validate_records([row.value for row in readable], source, scheme=scheme, neutral=neutral,
                                 skip_invalid=True, row_numbers=[row.number for row in readable])
    report.problems = sorted(unreadable + report.problems, key=lambda p: p.row)
    report.rows_read += len(unreadable)
    return report, [problem.render(source) for problem in report.problems]


def split_records(records: Sequence[dict], val_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Train/val split by problem: every row of one prompt lands on the same side, so validation never
    scores a problem the model was trained on. Reproducible for a seed and independent of row order: each
    problem's place comes from a hash of (seed, prompt). Rows keep their order within each side."""
    if not 0 <= val_fraction < 1:
        raise PRMError(f"val_fraction={val_fraction} is outside [0, 1); use e.g. 0.05 for 5% validation rows")
    sizes = Counter(record["prompt"] for record in records)
    target = round(val_fraction * len(records))
    if target == 0:
        return list(records), []
    if len(sizes) < 2:
        raise PRMError(f"cannot split {len(records)} rows by problem: they all share one prompt; "
                       "give a separate validation file or more problems")
    order = sorted(sizes, key=lambda prompt: hashlib.sha256(f"{seed}\0{prompt}".encode()).hexdigest())
    val_prompts: set[str] = set()
    taken = 0
    for prompt in order[:-1]:  # the last problem always stays in train, so train is never empty
        if taken >= target:
            break
        val_prompts.add(prompt)
        taken += sizes[prompt]
    train = [r for r in records if r["prompt"] not in val_prompts]
    val = [r for r in records if r["prompt"] in val_prompts]
    return train, val


def render_stats(stats: dict):
    """The stats as a two-column rich table for the CLI."""
    from rich.table import Table

    table = Table(title="data set", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("rows", f"{stats['rows']:,}")
    table.add_row("steps", f"{stats['steps']:,}")
    table.add_row("steps per row", _join(stats["steps_per_row"]))
    labels = stats["labels"]
    total = sum(labels.values())
    for kind in LABEL_KINDS:
        count = labels.get(kind, 0)
        table.add_row(f"{kind} steps", f"{count:,} ({_share(count / total if total else None)})")
    table.add_row("rows with an error", f"{stats['rows_with_error']:,} ({_share(stats['error_share'])})")
    if "tokens" in stats:
        table.add_row("tokens per row", _join(stats["tokens"]))
    if "max_length" in stats:
        table.add_row(f"rows truncated at {stats['max_length']}",
                      f"{stats['rows_truncated']:,} ({_share(stats['truncated_share'])})")
        table.add_row("steps dropped", f"{stats['steps_dropped']:,} ({_share(stats['steps_dropped_share'])})")
        table.add_row("labelled steps dropped", f"{stats['labelled_steps_dropped']:,}")
    return table


def _join(summary: dict[str, float | None]) -> str:
    return "  ".join(f"{key} {_number(value)}" for key, value in summary.items())


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
