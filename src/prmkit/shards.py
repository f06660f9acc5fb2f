"""One `prmkit label` or `prmkit search` job split into shards that any launcher runs side by side, sharing nothing
but the input file: which shard this process is, the problems it takes, the file and provenance it writes, and a
progress display that names it. `prmkit.shard_merge` joins the finished shards into the file one process writes.

Which problems. Problems go in the fixed batches of `problems_per_batch` that a one-process run uses
(`prmkit.data.problems.batches`), and batch b goes to shard b mod N. The unit is the batch, not the problem,
because a batch's random draws are seeded by its place (`derive_seed`) and shared by its problems: the transformers
backend samples a whole padded batch from one seed, so a problem's samples depend on the other prompts of its
generate call. A shard therefore makes exactly the generate calls a one-process run makes for its batches, and a
problem's record does not depend on N or on which shard ran it (it does depend on problems_per_batch, which is a
setting, recorded and checked like the seed). Round robin rather than contiguous blocks, so shards get easy and
hard problems alike when a file is sorted by difficulty or subject.

Which shard. `--shard I/N` (0-based I) wins over everything else. Without it the launcher's variables decide:
  torchrun (also `accelerate launch`): RANK of WORLD_SIZE;
  a SLURM array: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT (or MAX - MIN + 1), for
    arrays of one contiguous range with step 1 (`--array=0-7`, `--array=1-8%4`);
  a Kubernetes indexed job: JOB_COMPLETION_INDEX of PRMKIT_SHARD_COUNT, which the job must set (to its
    `completions`), since Kubernetes gives the pod its index but not the count.
A count of 1 is one process, writing OUT itself. Two of these that disagree (an array task that also runs
torchrun) are refused: the shard would be a guess.

What a shard writes. `OUT` becomes `OUT-stem.shard-I-of-N.jsonl`, appended and resumed exactly as a one-process
run continues its OUT, and `OUT-stem.shard-I-of-N.provenance.json` beside it: the command, the settings that decide
a record, a fingerprint of the problems read, and, once the shard has written its last batch, `complete` with the
file's record count and sha256, which the merge checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from prmkit.display import progress_bar
from prmkit.errors import PRMError
from prmkit.files import write_json_atomic

SHARD_NAME = re.compile(r"\.shard-(\d+)-of-(\d+)\.(?:jsonl|provenance\.json)$")
COUNT_VARIABLE = "PRMKIT_SHARD_COUNT"  # the shard count of a Kubernetes indexed job (its index is JOB_COMPLETION_INDEX)
LOG_EVERY = 30.0  # seconds between progress lines in a log (no terminal, or several processes on one)


@dataclass(frozen=True)
class Shard:
    index: int  # 0-based
    count: int
    source: str = "--shard"  # what decided it, for messages and provenance

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def takes(self, batch: int) -> bool:
        return batch % self.count == self.index

    def file(self, out: str | Path) -> Path:
        out = Path(out)
        return out.with_name(f"{out.stem}.shard-{self.index}-of-{self.count}{out.suffix}")

    def provenance_file(self, out: str | Path) -> Path:
        out = Path(out)
        return out.with_name(f"{out.stem}.shard-{self.index}-of-{self.count}.provenance.json")


def parse_shard(text: str, source: str = "--shard") -> Shard:
    """`I/N` as a Shard; the error names where the text came from and the fix."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match:
        raise PRMError(f"{source}={text!r}: give the shard as I/N, 0-based, e.g. 0/4 for the first of 4")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        last = f"{count - 1}/{count}" if count else "0/1"
        raise PRMError(f"{source}={text!r}: the index must be 0 to N-1 of N >= 1 shards, e.g. {last} for the last")
    return Shard(index, count, source)


def _integer(environ: Mapping[str, str], name: str) -> int:
    value = environ[name]
    try:
        return int(value)
    except ValueError:
        raise PRMError(f"{name}={value!r} is not a whole number; unset it or pass --shard I/N") from None


def launcher_shards(environ: Mapping[str, str]) -> list[Shard]:
    """The shard each launcher variable set in `environ` names (none of them when no launcher set its own)."""
    found = []
    if "WORLD_SIZE" in environ:
        world = _integer(environ, "WORLD_SIZE")
        rank = _integer(environ, "RANK") if "RANK" in environ else 0
        found.append(parse_shard(f"{rank}/{world}", "RANK/WORLD_SIZE (torchrun)"))
    if "SLURM_ARRAY_TASK_ID" in environ:
        task = _integer(environ, "SLURM_ARRAY_TASK_ID")
        low = _integer(environ, "SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in environ else 0
        step = _integer(environ, "SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in environ else 1
        span = _integer(environ, "SLURM_ARRAY_TASK_MAX") - low + 1 if "SLURM_ARRAY_TASK_MAX" in environ else None
        count = _integer(environ, "SLURM_ARRAY_TASK_COUNT") if "SLURM_ARRAY_TASK_COUNT" in environ else span
        if count is None:
            raise PRMError(f"SLURM_ARRAY_TASK_ID={task} without SLURM_ARRAY_TASK_COUNT or SLURM_ARRAY_TASK_MAX: "
                           "the shard count is unknown; pass --shard $SLURM_ARRAY_TASK_ID/N")
        if step != 1 or (span is not None and span != count):
            raise PRMError(f"the SLURM array is not one range with step 1 ({count} tasks from {low}, step {step}); "
                           "submit it as --array=0-N (a %limit is fine), or pass --shard I/N")
        found.append(parse_shard(f"{task - low}/{count}", "SLURM_ARRAY_TASK_ID (SLURM array)"))
    if "JOB_COMPLETION_INDEX" in environ:
        index = _integer(environ, "JOB_COMPLETION_INDEX")
        if COUNT_VARIABLE not in environ:
            raise PRMError(f"JOB_COMPLETION_INDEX={index} (a Kubernetes indexed job) without {COUNT_VARIABLE}: set "
                           f"{COUNT_VARIABLE} to the job's completions in its env, or pass --shard I/N")
        found.append(parse_shard(f"{index}/{_integer(environ, COUNT_VARIABLE)}",
                                 "JOB_COMPLETION_INDEX (Kubernetes indexed job)"))
    return found


def resolve_shard(flag: str | None, environ: Mapping[str, str] | None = None) -> Shard | None:
    """This process's shard: `--shard` when given, else the launcher's; None for one process (a count of 1)."""
    environ = os.environ if environ is None else environ
    if flag is not None:
        shard = parse_shard(flag)
    else:
        found = [s for s in launcher_shards(environ) if s.count > 1]  # a launch of one process names no shard
        if len({(s.index, s.count) for s in found}) > 1:
            named = "; ".join(f"{s.source} says {s}" for s in found)
            raise PRMError(f"the launchers disagree on this process's shard ({named}); pass --shard I/N to choose, "
                           "or run under one launcher")
        shard = found[0] if found else None
    return shard if shard is not None and shard.count > 1 else None


def check_rows(path: Path, written: set, assigned: set, shard: Shard) -> None:
    """A shard's file holds only its own problems' rows: another shard's would be written twice by the merge."""
    stray = sorted(written - assigned)
    if stray:
        raise PRMError(f"{path}: rows {', '.join(map(str, stray[:5]))} belong to other shards than {shard} of this "
                       f"input; pass --overwrite to start this shard afresh, or check --shard and --problems-per-batch")


def fingerprint(items: Iterable) -> str:
    """A sha256 over JSON items (the problems read), so shards made from different inputs are told apart."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps(item, ensure_ascii=False, sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def file_digest(path: Path) -> tuple[int, str]:
    """(lines, sha256) of a file."""
    digest, lines = hashlib.sha256(), 0
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            lines += chunk.count(b"\n")
    return lines, digest.hexdigest()


def differences(old: Mapping, new: Mapping, prefix: str = "") -> list[str]:
    """`key: old vs new` for every (nested) key whose value differs, in the user's dotted spelling."""
    found = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(f"{prefix}{key}: {json.dumps(a, default=str)} vs {json.dumps(b, default=str)}")
    return found


class ShardLog:
    """A shard's provenance file: written when the shard starts (complete false) and when its last batch is in."""

    def __init__(self, shard: Shard, command: str, out: str | Path, *, settings: dict, problems: dict,
                 assigned: int, order: tuple[str, ...], overwrite: bool = False):
        self.shard, self.path = shard, shard.provenance_file(out)
        self.file = shard.file(out)
        self.payload = {"command": command, "shard": str(shard), "index": shard.index, "count": shard.count,
                        "source": shard.source, "output": Path(out).name, "file": self.file.name,
                        "order": list(order), "problems": problems, "assigned": assigned, "settings": settings,
                        "complete": False}
        if self.path.exists() and not overwrite:
            self._check(json.loads(self.path.read_text(encoding="utf-8")))

    def _check(self, before: dict) -> None:
        """A shard continues only what the same command, settings and problems began."""
        keys = ("command", "problems", "settings")
        changed = differences({k: before.get(k) for k in keys}, {k: self.payload[k] for k in keys})
        if changed:
            raise PRMError(f"{self.path}: shard {self.shard} was started with other settings or input "
                           f"({'; '.join(changed)}, there vs now); run it with the same ones to continue it, or pass "
                           f"--overwrite to start it afresh")

    def start(self) -> None:
        self.file.touch()  # a shard given no batch still leaves its (empty) file for the merge to find
        write_json_atomic(self.path, self.payload)

    def finish(self) -> None:
        records, sha256 = file_digest(self.file)
        self.payload.update(complete=True, records=records, sha256=sha256,
                            finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        write_json_atomic(self.path, self.payload)


@contextmanager
def shard_progress(enabled: bool, description: str, shard: Shard | None, *, total: float | None = None,
                   unit: str | None = None, extra: str | None = None, **fields) -> Iterator[Callable[..., None]]:
    """`display.progress_bar` with the shard in its description, when `enabled`. A shard whose stderr is no
    terminal (a SLURM log, a pod's log), or that shares one with other processes of a launch (torchrun), prints a
    plain line every LOG_EVERY seconds and at the end instead: live bars of several processes on one terminal
    overwrite each other, and a log has no use for a bar."""
    named = f"{description} shard {shard}" if shard else description
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if not enabled or shard is None or (sys.stderr.isatty() and not launched):
        with progress_bar(enabled, named, total=total, unit=unit, extra=extra, **fields) as update:
            yield update
        return
    state = {"completed": 0, "total": total, **fields}
    last = [time.monotonic()]

    def line() -> str:
        done, whole = state["completed"], state["total"]
        share = f" ({100 * done / whole:.0f}%)" if whole else ""
        more = ", ".join(f"{value:,} {key}" for key, value in state.items()
                         if key not in ("completed", "total") and isinstance(value, (int, float)))
        return f"{named}: {done:,}/{whole or '?'} {unit or ''}{share}{', ' + more if more else ''}"

    def update(advance: float = 0, **changes) -> None:
        state.update(changes)
        state["completed"] += advance
        if time.monotonic() - last[0] >= LOG_EVERY:
            last[0] = time.monotonic()
            print(line(), file=sys.stderr, flush=True)

    yield update
    print(line(), file=sys.stderr, flush=True)
