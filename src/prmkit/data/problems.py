"""Problem rows and resumable JSONL output: what `prmkit label` and `prmkit search` both read and write.

A problem row holds the problem (`prompt`, `problem` or `question`, or the field --problem-field names) and, where
the data has one, its gold answer (`gold_answer` or `answer`, or --gold-field; GSM8K's `answer` is a worked
solution ending "#### N", read as N). Every bad row of a file is reported in one error.

The output is JSON lines appended a batch at a time, each batch flushed and synced to disk, so a killed run loses
at most the batch it was working on. On the next start a last line cut off by the kill (no newline) is truncated
away, and `ResumableRows` checks each line already there: written by this command, with this run's settings, for
the problem now at its row. What counts as "this run's settings" and "the same problem" is each command's own rule.

Problems go in fixed batches counted from the start of the file (`batches`), and every generate call of a batch
takes a seed derived from the run's seed and the batch's place (`derive_seed`). A batch that a kill left half
written is run again whole, with the same seeds, and only its missing rows are appended: a batch's samples depend
on every prompt in its generate calls (a backend samples a whole padded batch from one seed), so running only the
missing problems would write rows that an unbroken run never would.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Hashable, Iterable, Iterator, Sequence, TypeVar

from prmkit.answers import gold_answer
from prmkit.data.rows import RowReader
from prmkit.errors import PRMError

PROBLEM_FIELDS = ("prompt", "problem", "question")  # tried in this order when no problem field is named
GOLD_FIELDS = ("gold_answer", "answer")  # likewise for the gold field; synthetic records carry both, gold first
MAX_LISTED = 10  # bad rows spelled out in one error; the rest are counted

T = TypeVar("T")


def read_problem_rows(path: str | Path, parse: Callable[[int, object], T], *, limit: int | None, purpose: str,
                      expected: str, lenient: bool = False) -> list[T]:
    """`parse(row_number, value)` on every row (the first `limit`), or one PRMError naming every bad row.

    `purpose` ends "rows cannot be ..." ("labelled", "searched"); `expected` says what a row holds, for an empty
    file. With `lenient`, rows that are not JSON are listed with the bad ones instead of stopping the read.
    """
    reader = RowReader(path, lenient=lenient)
    parsed: list[T] = []
    bad: list[str] = []
    for row in reader:
        if limit is not None and len(parsed) + len(bad) >= limit:
            break
        if row.problem is not None:
            bad.append(f"  {reader.source}: row {row.number} {row.problem}")
            continue
        try:
            parsed.append(parse(row.number, row.value))
        except PRMError as err:
            bad.append(f"  {reader.source}: row {row.number}, {err}")
    if bad:
        more = f"\n  ... and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
        raise PRMError(f"{reader.source}: {len(bad)} of {len(parsed) + len(bad)} rows cannot be {purpose}:\n"
                       + "\n".join(bad[:MAX_LISTED]) + more)
    if not parsed:
        raise PRMError(f"{reader.source}: no rows; give a file with {expected}")
    return parsed


def problem_text(value, field: str | None, example: str) -> str:
    """The row's problem: from `field`, or the first of PROBLEM_FIELDS present. `example` shows a good row."""
    if not isinstance(value, dict):
        raise PRMError(f"field '-': expected an object such as {example}, got {type(value).__name__}")
    name = field or next((f for f in PROBLEM_FIELDS if f in value), None)
    if name is None or name not in value:
        tried = field or "/".join(PROBLEM_FIELDS)
        raise PRMError(f"field '{tried}': missing; give the problem there, or name its field with "
                       f"--problem-field (keys here: {', '.join(sorted(value)) or 'none'})")
    text = value[name]
    if not isinstance(text, str) or not text.strip():
        raise PRMError(f"field '{name}': the problem must be a non-empty string, got {short(text)}")
    return text


def problem_gold(value: dict, field: str | None, *, required: bool) -> str | None:
    """The row's gold answer as an answer (a "#### N" solution cut to N): from `field`, or the first of GOLD_FIELDS
    that is not null. None when the row has none and it is not `required`."""
    name = field or next((f for f in GOLD_FIELDS if value.get(f) is not None), None)
    if name is None or value.get(name) is None:
        if required:
            tried = field or "/".join(GOLD_FIELDS)
            raise PRMError(f"field '{tried}': missing; labels are measured against a gold answer: give it there, "
                           "or name its field with --gold-field")
        if field and field not in value:
            raise PRMError(f"field '{field}': missing (--gold-field names it); give the gold answer there, or leave "
                           "--gold-field unset to go without one")
        return None
    gold = value[name]
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)):
        raise PRMError(f"field '{name}': a gold answer is a string or a number, got {short(gold)}; "
                       "write it as text, e.g. \"\\\\frac{1}{2}\"")
    answer = gold_answer(str(gold))
    if not answer and required:
        raise PRMError(f"field '{name}': the gold answer is empty; give the final answer, e.g. \"18\"")
    return answer or None


def batches(items: Sequence[T], per_batch: int) -> Iterator[tuple[int, list[T]]]:
    """(batch number, items) in fixed batches of `per_batch`, counted from the first item: a batch's number (and so
    its seeds) depends on its place only, never on what an earlier run already wrote."""
    for number, start in enumerate(range(0, len(items), per_batch)):
        yield number, list(items[start:start + per_batch])


def derive_seed(seed: int, *parts) -> int:
    """A seed of its own for each generate call (a batch, a round, a method), from the run's seed: calls never
    share a random stream, and a batch gets the same samples whatever ran before it (a resumed run included)."""
    text = "/".join(str(part) for part in (seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def short(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def batch_option_problems(options, unit: str) -> list[str]:
    """What is wrong with the settings every command that samples problems with gold answers shares (`prmkit label`,
    `prmkit rl-filter`): problems_per_batch, checker_workers, check_timeout and limit; `unit` names what is counted."""
    problems = []
    if options.problems_per_batch < 1:
        problems.append(f"problems_per_batch={options.problems_per_batch}; use 1 or more")
    if options.checker_workers < 1:
        problems.append(f"checker_workers={options.checker_workers}; use 1 or more processes")
    if not options.check_timeout > 0:
        problems.append(f"check_timeout={options.check_timeout}; use a positive number of seconds")
    if options.limit is not None and options.limit < 1:
        problems.append(f"limit={options.limit}; use a positive number of {unit}")
    return problems


class AppendedJsonl:
    """A JSONL output that a run appends to and a later run continues: `lines()` are the complete lines already
    there (a torn last line truncated away, `truncated` then True), `append` writes a batch and syncs it."""

    def __init__(self, path: str | Path, *, holds: str, overwrite: bool = False):
        self.path = Path(path)
        if self.path.suffix.lower() not in (".jsonl", ".ndjson"):
            raise PRMError(f"{self.path}: the output is JSON lines, {holds}; give a .jsonl path")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if overwrite:
            self.path.unlink(missing_ok=True)
        self.truncated = False

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, line) for every non-empty complete line."""
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        if lines and lines[-1] and not raw.endswith(b"\n"):
            # A kill in the middle of a write leaves a last line without its newline: what it held is redone.
            with self.path.open("r+b") as handle:
                handle.truncate(len(raw) - len(lines[-1]))
            lines, self.truncated = lines[:-1], True
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield number, line

    def append(self, rows: list[dict]) -> None:
        if not rows:
            return
        with self.path.open("a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                handle.flush()
            os.fsync(handle.fileno())


class ResumableRows(AppendedJsonl):
    """An output a command continues: every line already there is checked against this run before any is kept, and
    `done` maps each line's `key` to the line (or to None without `keeps_lines`), kept up to date by `append`.

    A line is refused, with the file, its line number, what is wrong and the fix (another output path, or
    --overwrite), when it is not a JSON object with `needs`, when `drawn_by` it differs from `identity`, or when
    `other_row` says it holds something else than the input row of its number. A subclass sets the class attributes
    and the hooks; the checks and their wording are shared so the three commands refuse a stale file alike.
    """

    tool = ""  # the command that writes the file, e.g. "prmkit search"
    holds = ""  # what the file holds, for a path that is not .jsonl: "one row per problem"
    made = "made"  # how a line came about, in "was ... with other settings": "sampled", "searched"
    needs: tuple[str, ...] = ("row",)  # keys every line has; `row` is the input row it answers
    source = "the input"  # what the command reads rows from, as its help names it
    show_values = True  # name the differing settings with both values; off where values are too long to show
    keeps_lines = True  # keep each line in `done`; off where only which lines exist is needed (the lines are big)

    def __init__(self, path: str | Path, identity: dict, rows: Iterable, *, overwrite: bool = False):
        """`rows`: the input rows of this run (anything with a `.row` number); `identity`: this run's settings."""
        super().__init__(path, holds=self.holds, overwrite=overwrite)
        self.identity = identity
        self.done: dict[Hashable, dict | None] = {}
        self.fix = f"give another output path, or pass --overwrite to start {self.path} afresh"
        by_row = {item.row: item for item in rows}
        for number, line in self.lines():
            record = self._parse(number, line)
            theirs = self.drawn_by(record)
            if theirs != self.identity:
                raise PRMError(f"{self.path}: line {number} was {self.made} with other settings "
                               f"({self._differences(theirs)}); run with the same settings to continue it, "
                               f"or {self.fix}")
            other = self.other_row(record, by_row.get(record["row"]))
            if other is not None:
                raise PRMError(f"{self.path}: line {number} holds {other} than row {record['row']} of {self.source}; "
                               f"continue it with {self.source} it was made from, or {self.fix}")
            self.done[self.key(record)] = record if self.keeps_lines else None

    def _parse(self, number: int, line: bytes) -> dict:
        """The line as a record of this command, or the error saying it is not one."""
        try:
            record = json.loads(line)
        except ValueError:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
            why = "not JSON"
        else:
            fields = " and ".join(", ".join(self.needs).rsplit(", ", 1))
            why = f"not an object with {fields}"
            if (isinstance(record, dict) and all(key in record for key in self.needs)
                    and isinstance(record["row"], int) and isinstance(self.drawn_by(record), dict)):
                return record
        raise PRMError(f"{self.path}: line {number} is not a record written by {self.tool} ({why}); {self.fix}")

    def _differences(self, theirs: dict) -> str:
        # A setting on one side only differs too (a line written by a version with a setting this run lacks).
        keys = [key for key in sorted(set(theirs) | set(self.identity))
                if key not in theirs or key not in self.identity or theirs[key] != self.identity[key]]
        if not self.show_values:
            return f"{', '.join(keys)} differ"
        there = {key: repr(value) for key, value in theirs.items()}
        now = {key: repr(value) for key, value in self.identity.items()}
        return ", ".join(f"{key}: {there.get(key, 'not set')} there, {now.get(key, 'not set')} now" for key in keys)

    def drawn_by(self, record: dict) -> dict | None:
        """The settings the line was made with, compared whole with `identity`; None when the line has none."""
        raise NotImplementedError

    def other_row(self, record: dict, item) -> str | None:
        """What the line holds instead of input row `item` ("another problem"; `item` is None when the input has no
        row of the line's number), or None when it is that row's line."""
        raise NotImplementedError

    def key(self, record: dict) -> Hashable:
        """What `done` holds the line under: its row, where a row has one line."""
        return record["row"]

    def append(self, rows: list[dict]) -> None:
        super().append(rows)
        for row in rows:
            self.done[self.key(row)] = row if self.keeps_lines else None
