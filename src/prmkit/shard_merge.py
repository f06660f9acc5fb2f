"""`prmkit merge`: the shards of one `prmkit label` or `prmkit search` job (prmkit.shards) joined into the file one
process writes, byte for byte, with a provenance file that lists the shards.

Why sorting is enough. A one-process run appends its records batch by batch in input order, each problem's after
those of earlier problems, so its file is sorted by the keys every shard's provenance names under `order` (row,
then solution_index for label; row for search). Each shard's file is sorted the same way, being the same run
restricted to its batches. The merge streams the shard files through a k-way merge on those keys and writes each
line as the shard wrote it (its bytes, never re-encoded), so nothing but the order can change, and the order is
the one-process order. Memory stays one line per shard, whatever the job's size.

What is checked first, and reported together. Every shard 0..N-1 has its file and provenance; each is complete
(it wrote its last batch) and unchanged since (its line count and sha256); all were made by the same command with
the same settings and the same problems (the fingerprint of the input read). Each problem is named with its fix.
"""

from __future__ import annotations

import heapq
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prmkit.errors import PRMError
from prmkit.files import atomic_write, write_json_atomic
from prmkit.shards import SHARD_NAME, differences, file_digest

COMPARED = ("command", "order", "problems", "settings")  # what every shard of one job must agree on


@dataclass
class Merged:
    out: Path
    provenance: Path
    command: str  # label or search
    count: int  # shards
    records: int
    shards: list[dict]  # each shard's provenance, in shard order


def provenance_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}.shards.json")


def find_shards(out: Path) -> dict[int, dict[int, set[Path]]]:
    """{count: {index: the shard's files found (records and provenance)}} beside `out`."""
    found: dict[int, dict[int, set[Path]]] = {}
    for path in out.parent.glob(f"{out.stem}.shard-*"):
        match = SHARD_NAME.search(path.name)
        if match and path.name.startswith(f"{out.stem}.shard-"):
            index, count = int(match.group(1)), int(match.group(2))
            found.setdefault(count, {}).setdefault(index, set()).add(path)
    return found


def _shard_count(out: Path, found: dict[int, dict], count: int | None) -> int:
    if count is not None:
        if count not in found:
            raise PRMError(f"no shard of {out} was run with {count} shards (files {out.stem}.shard-I-of-{count}"
                           f"{out.suffix}); " + (f"found runs of {', '.join(map(str, sorted(found)))} shards"
                                                 if found else "run them first with --shard I/N"))
        return count
    if not found:
        raise PRMError(f"no shard of {out} in {out.parent} (files {out.stem}.shard-I-of-N{out.suffix}); shards are "
                       f"written by prmkit label or prmkit search with --shard I/N and this OUTPUT")
    if len(found) > 1:
        raise PRMError(f"{out.parent} holds shards of {out.name} from runs of {' and '.join(map(str, sorted(found)))} "
                       f"shards; pass --shards N to merge one of them (and remove the others' files)")
    return next(iter(found))


def _lines(path: Path, order: list[str], shard: str) -> Iterator[tuple[tuple, int, bytes]]:
    """(key, line) for every line of a shard file, checking that the keys rise as a one-process run writes them."""
    previous = None
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                row = json.loads(line)
                key = tuple(row[name] for name in order)
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
                raise PRMError(f"{path}: line {number} has no {'/'.join(order)}; the file was not written by prmkit "
                               f"--shard {shard}: run that shard again with --overwrite") from None
            if previous is not None and key <= previous:
                raise PRMError(f"{path}: line {number} ({dict(zip(order, key))}) is out of order or repeated; run "
                               f"shard {shard} again with --overwrite")
            previous = key
            yield key, number, line


def check_shards(out: Path, count: int | None = None) -> list[dict]:
    """Every shard's provenance, in shard order, or one PRMError saying what is missing or mixed and the fix."""
    found = find_shards(out)
    count = _shard_count(out, found, count)
    shards, problems, ready = [], [], 0
    for index in range(count):
        name = f"{index}/{count}"
        rerun = f"run its command again with --shard {name} (the same settings: it continues where it stopped)"
        paths = {p.name: p for p in found[count].get(index, set())}
        records = out.with_name(f"{out.stem}.shard-{index}-of-{count}{out.suffix}")
        log = out.with_name(f"{out.stem}.shard-{index}-of-{count}.provenance.json")
        if not paths:
            problems.append(f"shard {name}: not started (no {records.name}); run its command with --shard {name}")
            continue
        if log.name not in paths or records.name not in paths:
            lacking = records.name if records.name not in paths else log.name
            problems.append(f"shard {name}: {lacking} is missing; {rerun}")
            continue
        provenance = json.loads(log.read_text(encoding="utf-8"))
        shards.append(provenance)
        if not provenance.get("complete"):
            written = _rows_written(records)
            problems.append(f"shard {name}: stopped with {len(written)} of its {provenance.get('assigned', '?')} "
                            f"problems written; {rerun}")
            continue
        lines, sha256 = file_digest(records)
        if (lines, sha256) != (provenance.get("records"), provenance.get("sha256")):
            problems.append(f"shard {name}: {records.name} changed after the shard finished ({lines} lines now, "
                            f"{provenance.get('records')} then); run shard {name} again with --overwrite")
            continue
        ready += 1
    first = shards[0] if shards else None
    for other in shards[1:]:
        changed = differences({k: first.get(k) for k in COMPARED}, {k: other.get(k) for k in COMPARED})
        if changed:
            problems.append(f"shard {other['shard']} was made with other settings than shard {first['shard']} "
                            f"({'; '.join(changed)}, {first['shard']} vs {other['shard']}); run the odd ones again "
                            f"with the settings of the others and --overwrite")
    if problems:
        raise PRMError(f"cannot merge {out}: {ready} of {count} shards are complete\n  " + "\n  ".join(problems))
    return shards


def merge_shards(out: str | Path, *, count: int | None = None, overwrite: bool = False) -> Merged:
    """Check the shards of OUT and write OUT as one process would have, with OUT-stem.shards.json beside it."""
    out = Path(out)
    shards = check_shards(out, count)
    provenance = provenance_path(out)
    if out.exists() and not overwrite and not _written_by_merge(out, provenance):
        raise PRMError(f"{out} exists and is not the output of a merge of these shards; pass --overwrite to replace "
                       "it, or move it away")
    order = shards[0]["order"]
    files = [out.with_name(s["file"]) for s in shards]
    streams = [_lines(path, order, s["shard"]) for path, s in zip(files, shards)]
    previous, records = None, 0
    with atomic_write(out) as handle:
        for key, _, line in heapq.merge(*streams, key=lambda item: item[0]):
            if key == previous:
                raise PRMError(f"{dict(zip(order, key))} is in two shards of {out}; the shards were not made from one "
                               "assignment: run them again with --overwrite")
            previous = key
            handle.write(line.decode("utf-8"))
            records += 1
    lines, sha256 = file_digest(out)
    write_json_atomic(provenance, {
        "command": shards[0]["command"], "output": out.name, "records": lines, "sha256": sha256,
        "count": len(shards), "merged": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **{key: shards[0][key] for key in ("order", "problems", "settings")},
        "shards": [{key: s.get(key) for key in ("shard", "file", "records", "sha256", "source", "finished")}
                   for s in shards]})
    return Merged(out=out, provenance=provenance, command=shards[0]["command"], count=len(shards), records=records,
                  shards=shards)


def _rows_written(path: Path) -> set:
    """The rows of a stopped shard's complete lines (a line a kill cut off is not one)."""
    rows = set()
    for line in path.read_bytes().split(b"\n")[:-1]:
        try:
            rows.add(json.loads(line)["row"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            continue
    return rows


def _written_by_merge(out: Path, provenance: Path) -> bool:
    if not provenance.exists():
        return False
    return json.loads(provenance.read_text(encoding="utf-8")).get("sha256") == file_digest(out)[1]
