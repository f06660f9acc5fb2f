"""TRL's stepwise-supervision datasets -> prmkit records, checked as prmkit checks a data file, and the files a
prmkit run reads them from.

A run records its data as files (RUN/config.yaml names them, and a resumed run is held to them), so the rows are
written into prmkit's cache under a key made of their content: the same rows give the same file, and a resume
finds the data it started with.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass

from prmkit.backbones import cache_dir
from prmkit.data.records import validate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.tokenize import encode

COLUMNS = ("prompt", "completions", "labels")


@dataclass
class CutReport:
    rows: int = 0
    steps_cut: int = 0  # steps past max_completion_length, removed whole
    rows_dropped: int = 0  # no step fits max_completion_length, or the last step (train_on_last_step_only) is cut


def dataset_rows(dataset, name: str) -> list[dict]:
    """Rows of a `datasets.Dataset` (an IterableDataset is read whole; a list of dicts will do) in TRL's stepwise
    layout, checked: a problem names `name`, the row number and the field."""
    if dataset is None:
        return []
    if isinstance(dataset, dict):  # a DatasetDict, or TRL's several named eval datasets
        raise PRMError(f"{name} is a dict ({', '.join(map(str, dataset))}): prmkit reads one dataset of rows; pass "
                       f"one of them (e.g. {name}=datasets[{next(iter(dataset), 'test')!r}])")
    columns = getattr(dataset, "column_names", None) or []
    if "input_ids" in columns:
        raise PRMError(f"{name} is already tokenized (it has an input_ids column): prmkit tokenizes the prompt, "
                       "completions and labels columns itself, with the same function its scorer uses; pass the "
                       "untokenized dataset")
    rows = [{key: row[key] for key in COLUMNS if key in row} for row in dataset]
    validate_records(rows, name)  # PRMError naming every bad row (prmkit's rules: bool, 0/1, soft, -1/0/+1)
    return rows


def cut_completions(rows: list[dict], tokenizer, *, separator: str, limit: int | None,
                    last_step_only: bool) -> tuple[list[dict], CutReport]:
    """TRL's max_completion_length: the steps (each with its separator) may take at most `limit` tokens. TRL cuts
    the token sequence there, mid-step; a step's label sits on its last token, so what TRL trains on is the steps
    that fit whole, and prmkit keeps exactly those (its tokenization never labels or keeps a part of a step). A row
    none of whose steps fits, or whose last step is cut when only the last step is trained on, has nothing to
    train on and is dropped (TRL would have kept it, every label ignored)."""
    report = CutReport(rows=len(rows))
    if limit is None:
        return rows, report
    sep_len = len(encode(tokenizer, separator)) if separator else 0
    kept = []
    for row in rows:
        used, steps = 0, 0
        for step in row["completions"]:
            used += len(encode(tokenizer, step)) + sep_len
            if used > limit:
                break
            steps += 1
        report.steps_cut += len(row["completions"]) - steps
        if steps == 0 or (last_step_only and steps < len(row["completions"])):
            report.rows_dropped += 1
            continue
        kept.append({**row, "completions": row["completions"][:steps], "labels": row["labels"][:steps]})
    if report.steps_cut:
        print(f"prmkit: max_completion_length={limit}: {report.steps_cut} step(s) past it removed whole, "
              f"{report.rows_dropped} of {report.rows} row(s) left with nothing to train on dropped",
              file=sys.stderr, flush=True)
    return kept, report


def rows_file(rows: list[dict], kind: str) -> str:
    """The rows as a JSONL file in prmkit's cache, named by their content."""
    lines = [json.dumps(row, ensure_ascii=False, sort_keys=True) for row in rows]
    key = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:20]
    path = cache_dir() / "trl-data" / f"{kind}-{key}.jsonl"
    if not path.is_file():
        write_jsonl(rows, path)
    return str(path)

