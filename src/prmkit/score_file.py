"""`prmkit score`: score every row of a data file into a JSONL file, in bounded memory.

Two row layouts are read:
  a record     {"prompt", "completions": [step, ...], ...} (labels optional), or "completion": one raw string
               cut at the run's separator; written back with `step_scores` and `score` (the aggregate);
  candidates   {"prompt", "candidates": [str | [step, ...], ...], ...} for best-of-N; written back with
               `step_scores` (one list per candidate), `scores` (aggregates) and `best` (the winner's index).
Every other key of a row is kept. Rows are read and written in chunks, so a million-row file never sits in
memory; the output is written to a temporary file and renamed at the end, so a failed run leaves no half file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from prmkit.distributed import Launch, all_ranks_ok, gather_from_ranks
from prmkit.errors import PRMError
from prmkit.score import PRMScorer, Separator, aggregate, prompt_text, rank_candidates

CHUNK_ROWS = 256


@dataclass
class ParsedRow:
    kind: str  # "record" | "candidates"
    prompt: str
    steps: list[list[str]]  # one step list per chain (one chain for a record)
    split_from_text: bool  # steps were cut from raw strings, so they are written back beside the scores


def parse_row(row, where: str, scorer: PRMScorer, separator: Separator = None) -> ParsedRow:
    """The chains of one input row; `where` ("file: row N") starts every error message."""
    if not isinstance(row, dict):
        raise PRMError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "prompt" not in row:
        raise PRMError(f"{where}: no 'prompt' (keys here: {sorted(row)}); each row needs the problem as 'prompt'")
    try:
        prompt = prompt_text(row["prompt"])
    except PRMError as err:
        raise PRMError(f"{where}, field 'prompt': {err}") from None
    if "candidates" in row:
        candidates = row["candidates"]
        if not isinstance(candidates, list) or not candidates:
            raise PRMError(f"{where}, field 'candidates': expected a non-empty list of strings or step lists, "
                           f"got {_describe(candidates)}")
        steps = []
        for i, candidate in enumerate(candidates):
            if isinstance(candidate, str):
                steps.append(scorer.split_steps(candidate, separator))
            elif isinstance(candidate, list) and all(isinstance(s, str) for s in candidate):
                steps.append(candidate)
            else:
                raise PRMError(f"{where}, field 'candidates[{i}]': expected a string or a list of step strings, "
                               f"got {_describe(candidate)}")
        return ParsedRow("candidates", prompt, steps, any(isinstance(c, str) for c in candidates))
    if isinstance(row.get("completions"), list) and all(isinstance(s, str) for s in row["completions"]):
        return ParsedRow("record", prompt, [row["completions"]], False)
    if isinstance(row.get("completion"), str):
        return ParsedRow("record", prompt, [scorer.split_steps(row["completion"], separator)], True)
    raise PRMError(f"{where}: no chain to score; give 'completions' (a list of steps), 'completion' (one string) "
                   "or 'candidates' (a list for best-of-N)")


def attach_scores(row: dict, parsed: ParsedRow, scores: list[list[float | None]], how: str) -> dict:
    """The input row plus its scores (see the module docstring for the keys)."""
    out = dict(row)
    if parsed.kind == "record":
        if parsed.split_from_text:
            out["steps"] = parsed.steps[0]
        out["step_scores"] = scores[0]
        out["score"] = aggregate(scores[0], how)
        return out
    if parsed.split_from_text:
        out["candidate_steps"] = parsed.steps
    ranked = rank_candidates(scores, how)
    out["step_scores"] = scores
    out["scores"] = [aggregate(s, how) for s in scores]
    out["best"] = ranked[0].index if ranked[0].score is not None else None
    return out


def score_rows(scorer: PRMScorer, rows: list, *, how: str = "min", separator: Separator = None,
               source: str = "<rows>", first_row: int = 1) -> list[dict]:
    """Score a list of rows in one `score_many` call, so chains of all rows share length-sorted batches."""
    parsed = [parse_row(row, f"{source}: row {first_row + i}", scorer, separator) for i, row in enumerate(rows)]
    flat = [(p.prompt, steps) for p in parsed for steps in p.steps]
    scores = scorer.score_many(flat)
    out, cursor = [], 0
    for row, p in zip(rows, parsed):
        out.append(attach_scores(row, p, scores[cursor:cursor + len(p.steps)], how))
        cursor += len(p.steps)
    return out


def iter_row_chunks(path: str | Path, chunk_rows: int = CHUNK_ROWS) -> Iterator[tuple[int, list, int]]:
    """(first row number, rows, progress units) per chunk. JSONL and Parquet stream (progress in bytes and rows);
    a .json array must be parsed whole, then it is chunked."""
    path = Path(path)
    if not path.is_file():
        raise PRMError(f"{path}: no such file; give a .jsonl, .json or .parquet file of rows")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        yield from _jsonl_chunks(path, chunk_rows)
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        number = 1
        for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
            rows = batch.to_pylist()
            yield number, rows, len(rows)
            number += len(rows)
    elif suffix == ".json":
        from prmkit.data.io import read_rows

        rows = read_rows(path)
        for start in range(0, len(rows), chunk_rows):
            yield start + 1, rows[start:start + chunk_rows], len(rows[start:start + chunk_rows])
    else:
        raise PRMError(f"{path}: unknown input format '{path.suffix}'; use .jsonl, .json or .parquet")


def progress_total(path: str | Path) -> int:
    """The total that `iter_row_chunks`' progress units add up to."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if suffix == ".json":
        from prmkit.data.io import read_rows

        return len(read_rows(path))
    return path.stat().st_size


def _jsonl_chunks(path: Path, chunk_rows: int) -> Iterator[tuple[int, list, int]]:
    rows, units, first = [], 0, 1
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            units += len(raw)
            if not raw.strip():
                continue
            if not rows:
                first = number
            try:
                rows.append(json.loads(raw.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise PRMError(f"{path}: row {number} is not valid UTF-8 JSON ({err}); fix or delete that line") \
                    from None
            if len(rows) == chunk_rows:
                yield first, rows, units
                rows, units = [], 0
    if rows or units:
        yield first, rows, units


def score_file(scorer: PRMScorer, in_path: str | Path, out_path: str | Path, *, how: str = "min",
               separator: Separator = None, chunk_rows: int = CHUNK_ROWS, limit: int | None = None,
               progress: bool = True, launch: Launch | None = None) -> dict:
    """Score `in_path` row by row into the JSONL file `out_path`; returns counts and timing.

    Under torchrun (`launch` with several ranks) chunk k goes to rank k mod world size; each rank writes its rows
    to a part file beside the output, and rank 0 interleaves the parts back into input order. Counts are summed
    over ranks. If any rank fails, every rank stops and no output file appears."""
    launch = launch or Launch()
    aggregate([1.0], how)  # reject an unknown aggregation before any work
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
                _progress(progress and launch.is_main, in_path) as advance:
            for index, (first, rows, units) in enumerate(iter_row_chunks(in_path, chunk_rows)):
                if limit is not None:
                    rows = rows[:max(limit - rows_read, 0)]
                rows_read += len(rows)
                if index % launch.world_size == launch.rank:
                    _write_scored(handle, scorer, rows, counts, how=how, separator=separator, source=str(in_path),
                                  first_row=first)
                    chunk_sizes.append(len(rows))
                advance(units, rows_read)
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
    seconds = time.perf_counter() - started
    rate = round(counts["rows"] / seconds, 2) if seconds else None
    return {**counts, "seconds": round(seconds, 2), "rows_per_s": rate, "output": str(target),
            "ranks": launch.world_size}


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


class _progress:
    """A rich progress bar on stderr (or nothing), used as `with _progress(...) as advance: advance(units, rows)`."""

    def __init__(self, enabled: bool, in_path: str | Path):
        self.enabled, self.in_path = enabled, in_path
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda units, rows: None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("scoring {task.description}"), BarColumn(), TaskProgressColumn(),
                            TextColumn("{task.fields[rows]} rows"), TimeRemainingColumn(),
                            console=Console(stderr=True))
        task = self.bar.add_task(Path(self.in_path).name, total=progress_total(self.in_path), rows=0)
        self.bar.start()
        return lambda units, rows: self.bar.update(task, advance=units, rows=rows)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def _describe(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"
