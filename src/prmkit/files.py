"""Files that are whole or absent: written beside their target under a `.partial-` name, flushed to disk, then
renamed over it, so a reader (or a resumed run) sees the old content or the new one, never half of either. A
process killed mid-write leaves only a `.partial-*` file, which the next run start in that folder deletes."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, TextIO

PARTIAL_PREFIX = ".partial-"


@contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[TextIO]:
    """`with atomic_write(path) as handle:` writes UTF-8 text that replaces `path` only when the block ends
    without an error."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target.parent,
                                         prefix=f"{PARTIAL_PREFIX}{target.name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, target)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as handle:
        handle.write(text)


def write_json_atomic(path: str | os.PathLike, payload) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, default=str) + "\n")


def write_jsonl(records: Iterable[dict], path: str | os.PathLike) -> int:
    """Records as UTF-8 JSON lines, one per line; returns how many were written."""
    count = 0
    with atomic_write(path) as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every line of a JSONL file prmkit wrote, parsed (blank lines skipped)."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
