"""What `prmkit search` reads and where it writes: problems (with gold answers when the data has them) from any
file the row reader takes, and the output JSONL, continued where an earlier run of the same search stopped.

The output is appended a batch of problems at a time and synced to disk, so a killed run loses at most the batch
it was working on. On the next start the rows already there are kept (a last line cut off by the kill is
dropped), checked against this run (same options, policy, PRM, and the same problem at each row number), and
only the problems without a row are searched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from prmkit.answers import gold_answer
from prmkit.data.rows import RowReader
from prmkit.errors import PRMError
from prmkit.search.options import GOLD_FIELDS, PROBLEM_FIELDS, SearchOptions

MAX_LISTED = 10  # bad rows spelled out in one error; the rest are counted


@dataclass(frozen=True)
class Problem:
    row: int  # the row number in DATA, as every prmkit command counts rows
    text: str
    gold: str | None  # the gold answer as an answer (GSM8K's "#### N" solution already cut to N)
    id: object = None  # the row's `id`, passed through when it has one


def read_problems(path: str | Path, options: SearchOptions) -> list[Problem]:
    """Every problem of DATA (the first `limit`), or one error listing every bad row."""
    reader = RowReader(path)
    problems: list[Problem] = []
    bad: list[str] = []
    for row in reader:
        if options.limit is not None and len(problems) + len(bad) >= options.limit:
            break
        try:
            problems.append(_problem(row.number, row.value, options))
        except PRMError as err:
            bad.append(f"  {reader.path}: row {row.number}, {err}")
    if bad:
        more = f"\n  ... and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
        raise PRMError(f"{reader.path}: {len(bad)} of {len(problems) + len(bad)} rows cannot be searched:\n"
                       + "\n".join(bad[:MAX_LISTED]) + more)
    if not problems:
        raise PRMError(f"{reader.path}: no rows; give a file with one problem per row")
    return problems


def _problem(number: int, value, options: SearchOptions) -> Problem:
    if not isinstance(value, dict):
        raise PRMError(f"field '-': expected an object such as {{\"prompt\": ..., \"gold_answer\": ...}}, got "
                       f"{type(value).__name__}")
    name = options.problem_field or next((f for f in PROBLEM_FIELDS if f in value), None)
    if name is None or name not in value:
        tried = f"'{options.problem_field}'" if options.problem_field else "/".join(PROBLEM_FIELDS)
        raise PRMError(f"field '{tried}': missing; give the problem there, or name its field with "
                       f"--problem-field (keys here: {', '.join(sorted(value)) or 'none'})")
    text = value[name]
    if not isinstance(text, str) or not text.strip():
        raise PRMError(f"field '{name}': the problem must be a non-empty string, got {_short(text)}")
    gold_name = options.gold_field or next((f for f in GOLD_FIELDS if value.get(f) is not None), None)
    gold = value.get(gold_name) if gold_name else None
    if options.gold_field and options.gold_field not in value:
        raise PRMError(f"field '{options.gold_field}': missing (--gold-field names it); give the gold answer "
                       "there, or leave --gold-field unset to search without one")
    if isinstance(gold, bool) or (gold is not None and not isinstance(gold, (str, int, float))):
        raise PRMError(f"field '{gold_name}': a gold answer is a string or a number, got {_short(gold)}; "
                       "write it as text, e.g. \"\\\\frac{1}{2}\"")
    if gold is not None:
        gold = gold_answer(str(gold)) or None
    return Problem(row=number, text=text, gold=gold, id=value.get("id"))


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


class Output:
    """The output JSONL: rows already written (by row number), and appending a batch of new ones."""

    def __init__(self, path: str | Path, identity: dict, problems: list[Problem], *, overwrite: bool = False):
        self.path = Path(path)
        if self.path.suffix.lower() not in (".jsonl", ".ndjson"):
            raise PRMError(f"{self.path}: the output is JSON lines, one row per problem; give a .jsonl path")
        self.identity = identity
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if overwrite:
            self.path.unlink(missing_ok=True)
        self.done: dict[int, dict] = self._read(problems) if self.path.exists() else {}

    def _read(self, problems: list[Problem]) -> dict[int, dict]:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        if lines and lines[-1] and not raw.endswith(b"\n"):
            # A kill in the middle of a write leaves a last line without its newline: that problem is redone.
            keep = len(raw) - len(lines[-1])
            with self.path.open("r+b") as handle:
                handle.truncate(keep)
            lines = lines[:-1]
        by_row = {p.row: p for p in problems}
        done: dict[int, dict] = {}
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            fix = f"give another output path, or pass --overwrite to start {self.path} afresh"
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise PRMError(f"{self.path}: line {number} is not JSON; it was not written by prmkit search: "
                               f"{fix}") from None
            mine = {key: row.get(key) for key in self.identity}
            if mine != self.identity:
                changed = sorted(k for k in self.identity if mine.get(k) != self.identity[k])
                raise PRMError(f"{self.path}: line {number} comes from a search with other settings "
                               f"({', '.join(changed)} differ); run with the same settings to continue it, or {fix}")
            problem = by_row.get(row.get("row"))
            if problem is not None and problem.text != row.get("prompt"):
                raise PRMError(f"{self.path}: line {number} holds another problem than row {problem.row} of the "
                               f"data; {fix}")
            done[row["row"]] = row
        return done

    def append(self, rows: list[dict]) -> None:
        if not rows:
            return
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        for row in rows:
            self.done[row["row"]] = row
