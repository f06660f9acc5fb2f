"""`prmkit score`: score every row of a data file into a JSONL file, in bounded memory.

Two row layouts are read: a record ({"prompt", "completions": [...]}, labels optional, or "completion": one raw
string) and best-of-N candidates ({"prompt", "candidates": [...]}); each row is written back with its scores, in
the shape `prmkit serve` answers with (prmkit.scoring.scored_rows). Every other key of a row is kept. Rows are read
and written in chunks, so a million-row file never sits in memory; the output is written to a temporary file and
renamed at the end, so a failed run leaves no half file.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from prmkit.data.rows import Row, RowReader
from prmkit.display import progress_bar
from prmkit.device import Launch
from prmkit.errors import PRMError
from prmkit.scoring.aggregate import aggregate
from prmkit.scoring.distributed import all_ranks_ok, gather_from_ranks
from prmkit.scoring.inputs import Separator, parse_row
from prmkit.scoring.options import ScoreFileOptions
from prmkit.scoring.scored_rows import attach_scores
from prmkit.scoring.scorer import PRMScorer


@dataclass
class ScoreFileResult:
    rows: int
    chains: int
    steps: int  # reasoning steps scored (or left unscored past max_length)
    seconds: float
    output: str
    ranks: int


def score_rows(scorer: PRMScorer, rows: list[Row], *, how: str = "min", separator: Separator = None,
               source: str = "<rows>") -> list[dict]:
    """Score rows in one `score_many` call, so chains of all rows share length-sorted batches."""
    separator = scorer.metadata.separator if separator is None else separator
    parsed = [parse_row(row.value, f"{source}: row {row.number}", separator) for row in rows]
    flat = [(p.prompt, steps) for p in parsed for steps in p.steps]
    scores = scorer.score_many(flat)
    out, cursor = [], 0
    for row, p in zip(rows, parsed):
        out.append(attach_scores(row.value, p, scores[cursor:cursor + len(p.steps)], how))
        cursor += len(p.steps)
    return out


def row_chunks(reader: RowReader, chunk_rows: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in reader:
        chunk.append(row)
        if len(chunk) == chunk_rows:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def score_file(scorer: PRMScorer, in_path: str | Path, out_path: str | Path,
               options: ScoreFileOptions = ScoreFileOptions(), *, progress: bool = True,
               launch: Launch | None = None) -> ScoreFileResult:
    """Score `in_path` row by row into the JSONL file `out_path`; returns counts and timing.

    Under torchrun (`launch` with several ranks) chunk k goes to rank k mod world size; each rank writes its rows
    to a part file beside the output, and rank 0 interleaves the parts back into input order. Counts are summed
    over ranks. If any rank fails, every rank stops and no output file appears."""
    launch = launch or Launch()
    how, limit = options.aggregate, options.limit
    aggregate([1.0], how)  # reject an unknown aggregation before any work
    separator = _regex(options.split_regex) if options.split_regex else None
    reader = RowReader(in_path)
    target = Path(out_path)
    if target.suffix.lower() not in (".jsonl", ".ndjson"):
        raise PRMError(f"{target}: the output is JSON lines; give a .jsonl path")
    if target.exists() and Path(in_path).exists() and target.resolve() == Path(in_path).resolve():
        raise PRMError(f"{target}: output would overwrite the input; give another output path")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = _part_path(target, launch)
    counts = {"rows": 0, "chains": 0, "steps": 0}
    chunk_sizes: list[int] = []  # rows of each chunk this rank scored, in order
    rows_read = 0
    started = time.perf_counter()
    try:
        with part.open("w", encoding="utf-8") as handle, \
                progress_bar(progress and launch.is_main, f"scoring {reader.path.name}",
                             total=reader.progress_total, extra="{task.fields[rows]} rows", rows=0) as update:
            for index, rows in enumerate(row_chunks(reader, options.chunk_rows)):
                if limit is not None:
                    rows = rows[:max(limit - rows_read, 0)]
                rows_read += len(rows)
                if index % launch.world_size == launch.rank:
                    _write_scored(handle, scorer, rows, counts, how=how, separator=separator, source=str(in_path))
                    chunk_sizes.append(len(rows))
                update(completed=reader.progress_done, rows=rows_read)  # bytes for JSONL, rows otherwise
                if limit is not None and rows_read >= limit:
                    break
    except Exception:
        part.unlink(missing_ok=True)
        all_ranks_ok(launch, False)  # the peers learn of it at their own check below
        raise
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    failed = all_ranks_ok(launch, True)
    if failed:
        part.unlink(missing_ok=True)
        raise PRMError(f"rank(s) {', '.join(map(str, failed))} stopped with an error (printed above); "
                       f"{target} was not written")
    if launch.distributed:
        shares = gather_from_ranks(launch, (counts, chunk_sizes))
        counts = {key: sum(c[key] for c, _ in shares) for key in counts}
        if launch.is_main:
            _merge_parts(target, [_part_path(target, replace(launch, rank=r)) for r in range(launch.world_size)],
                         [sizes for _, sizes in shares])
    else:
        os.replace(part, target)
    return ScoreFileResult(**counts, seconds=round(time.perf_counter() - started, 2), output=str(target),
                           ranks=launch.world_size)


def _write_scored(handle, scorer: PRMScorer, rows: list, counts: dict, **kwargs) -> None:
    for row in score_rows(scorer, rows, **kwargs):
        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        chains = row["step_scores"] if "candidates" in row else [row["step_scores"]]
        counts["chains"] += len(chains)
        counts["steps"] += sum(len(c) for c in chains)
    counts["rows"] += len(rows)


def _part_path(target: Path, launch: Launch) -> Path:
    """Where a rank writes before the rename (one process) or the merge (several): hidden, beside the output."""
    if launch.distributed:
        return target.parent / f".{target.name}.rank{launch.rank}-of-{launch.world_size}.tmp"
    return target.parent / f".{target.name}.{os.getpid()}.tmp"


def _merge_parts(target: Path, parts: list[Path], chunk_sizes: list[list[int]]) -> None:
    """Chunk k of the input is the next chunk of part k mod len(parts): read them back in that order."""
    missing = [str(p) for p in parts if not p.is_file()]
    if missing:
        raise PRMError(f"cannot merge the ranks' outputs: {', '.join(missing)} not found; with several machines the "
                       f"output folder {target.parent} must be on a filesystem they all share")
    merged = target.parent / f".{target.name}.merged.tmp"
    handles = [p.open("r", encoding="utf-8") for p in parts]
    try:
        with merged.open("w", encoding="utf-8") as out:
            for k in range(max(len(s) for s in chunk_sizes)):
                for rank, sizes in enumerate(chunk_sizes):
                    if k < len(sizes):
                        for _ in range(sizes[k]):
                            out.write(handles[rank].readline())
        os.replace(merged, target)
    finally:
        for handle in handles:
            handle.close()
        merged.unlink(missing_ok=True)
        for part in parts:
            part.unlink(missing_ok=True)


def _regex(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as err:
        raise PRMError(f"--split-regex {pattern!r} is not a valid regular expression ({err}); "
                       r"e.g. --split-regex '\n\s*\n'") from None
