"""What `prmkit label` reads (problems with gold answers, and optionally the solutions to label) and where it
writes (the output JSONL, continued where a killed run stopped).

A row holds the problem (`prompt`, `problem` or `question`, or the field --problem-field names) and its gold
answer (`gold_answer` or `answer`, or --gold-field; GSM8K's `answer` is a worked solution ending "#### N", read
as N). A row may also hold one solution to label: `completions`, a list of steps (the record layout), or
`solution`, one string cut into steps at the delimiter. With `solutions` set, the command samples that many
solutions per problem instead and ignores the rows' own. Every bad row is reported in one error.

The output holds one record per labelled solution. Records are appended in input order, a batch of problems at a
time, each line flushed as it is written and the file synced to disk after every batch, so a kill loses at most the
batch it was working on. On the next start the records already there are kept: a last line cut off by the kill is
truncated away, every record's provenance must match this run's settings (else the run stops and says how to fix
it), and each record's problem must be the one at its row of the input. Because records go out in batch order,
every batch before the last one seen is complete; the last one seen is run again (with the same seeds it gives the
same records) and only its missing records are written.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from prmkit.answers import gold_answer
from prmkit.data.rows import RowReader
from prmkit.errors import PRMError
from prmkit.labeling.options import GOLD_FIELDS, PROBLEM_FIELDS, LabelOptions

MAX_LISTED = 10  # bad rows spelled out in one error; the rest are counted
SOLUTION_FIELDS = ("completions", "solution")


@dataclass(frozen=True)
class Problem:
    index: int  # 0-based position among the problems read (decides its batch)
    row: int  # the row number in the input, as every prmkit command counts rows
    text: str
    gold: str
    steps: tuple[str, ...] | None  # the row's own solution, cut into steps; None when solutions are sampled
    id: object = None  # the row's `id`, passed through when it has one


def split_steps(text: str, delimiter: str) -> list[str]:
    """A solution string's steps: cut at the delimiter, each stripped, empty ones dropped."""
    return [part.strip() for part in text.split(delimiter) if part.strip()]


def read_problems(path: str | Path, options: LabelOptions) -> list[Problem]:
    """Every problem of the input (the first `limit`), or one error listing every bad row."""
    reader = RowReader(path, lenient=True)
    problems: list[Problem] = []
    bad: list[str] = []
    for row in reader:
        if options.limit is not None and len(problems) + len(bad) >= options.limit:
            break
        if row.problem is not None:
            bad.append(f"  {reader.path}: row {row.number} {row.problem}")
            continue
        try:
            problems.append(_problem(len(problems), row.number, row.value, options))
        except PRMError as err:
            bad.append(f"  {reader.path}: row {row.number}, {err}")
    if bad:
        more = f"\n  ... and {len(bad) - MAX_LISTED} more" if len(bad) > MAX_LISTED else ""
        raise PRMError(f"{reader.path}: {len(bad)} of {len(problems) + len(bad)} rows cannot be labelled:\n"
                       + "\n".join(bad[:MAX_LISTED]) + more)
    if not problems:
        raise PRMError(f"{reader.path}: no rows; give a file with one problem and its gold answer per row")
    return problems


def _problem(index: int, number: int, value, options: LabelOptions) -> Problem:
    if not isinstance(value, dict):
        raise PRMError(f"field '-': expected an object such as {{\"problem\": ..., \"answer\": ...}}, got "
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
    if gold_name is None or value.get(gold_name) is None:
        tried = f"'{options.gold_field}'" if options.gold_field else "/".join(GOLD_FIELDS)
        raise PRMError(f"field '{tried}': missing; labels are measured against a gold answer: give it there, or "
                       "name its field with --gold-field")
    gold = value[gold_name]
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)):
        raise PRMError(f"field '{gold_name}': a gold answer is a string or a number, got {_short(gold)}; "
                       "write it as text, e.g. \"\\\\frac{1}{2}\"")
    gold = gold_answer(str(gold))
    if not gold:
        raise PRMError(f"field '{gold_name}': the gold answer is empty; give the final answer, e.g. \"18\"")
    steps = None if options.solutions is not None else _steps(value, options.delimiter)
    return Problem(index=index, row=number, text=text, gold=gold, steps=steps, id=value.get("id"))


def _steps(value: dict, delimiter: str) -> tuple[str, ...]:
    name = next((f for f in SOLUTION_FIELDS if f in value), None)
    if name is None:
        raise PRMError("field 'completions'/'solution': missing; give the solution to label (a list of steps, or "
                       "one string cut at --delimiter), or pass --solutions N to sample N solutions per problem")
    solution = value[name]
    if isinstance(solution, str):
        steps = split_steps(solution, delimiter)
    elif isinstance(solution, list) and all(isinstance(step, str) for step in solution):
        empty = [i for i, step in enumerate(solution) if not step.strip()]
        if empty:
            raise PRMError(f"field '{name}[{empty[0]}]': the step is empty; remove empty steps")
        steps = list(solution)
    else:
        raise PRMError(f"field '{name}': expected a list of step strings or one string, got {_short(solution)}")
    if not steps:
        raise PRMError(f"field '{name}': the solution has no steps; give at least one non-empty step")
    return tuple(steps)


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


VOLATILE = ("rollouts", "tokens", "solution_tokens")  # provenance that measures a record instead of deciding it


class Output:
    def __init__(self, path: str | Path, identity: dict, problems: list[Problem], *, overwrite: bool = False):
        self.path = Path(path)
        if self.path.suffix.lower() not in (".jsonl", ".ndjson"):
            raise PRMError(f"{self.path}: the output is JSON lines, one record per solution; give a .jsonl path")
        self.identity = identity
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if overwrite:
            self.path.unlink(missing_ok=True)
        self.done: set[tuple[int, int]] = set()  # (row, solution_index) already written
        self.truncated = False
        if self.path.exists():
            self._read({p.row: p for p in problems})

    def _read(self, by_row: dict[int, Problem]) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        if lines and lines[-1] and not raw.endswith(b"\n"):
            # A kill in the middle of a write leaves a last line without its newline: that record is redone.
            with self.path.open("r+b") as handle:
                handle.truncate(len(raw) - len(lines[-1]))
            lines, self.truncated = lines[:-1], True
        fix = f"pass --overwrite to start {self.path} afresh, or give another output path"
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                provenance = record["label"]
                key = (record["row"], record["solution_index"])
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
                raise PRMError(f"{self.path}: line {number} is not a record written by prmkit label; {fix}") from None
            mine = {name: provenance.get(name) for name in self.identity}
            if mine != self.identity:
                changed = ", ".join(f"{name}: {mine.get(name)!r} there, {self.identity[name]!r} now"
                                    for name in self.identity if mine.get(name) != self.identity[name])
                raise PRMError(f"{self.path}: line {number} was labelled with other settings ({changed}); run with "
                               f"the same settings to continue it, or {fix}")
            problem = by_row.get(key[0])
            if problem is None or problem.text != record.get("prompt"):
                raise PRMError(f"{self.path}: line {number} holds another problem than row {key[0]} of the input; "
                               f"continue it with the input it was made from, or {fix}")
            self.done.add(key)

    def last_batch(self, problems: list[Problem], per_batch: int) -> int:
        """The batch of the last record written (-1 when none): batches before it are complete."""
        index = {p.row: p.index for p in problems}
        return max((index[row] // per_batch for row, _ in self.done), default=-1)

    def append(self, records: list[dict]) -> None:
        if not records:
            return
        with self.path.open("a", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
            os.fsync(handle.fileno())
        self.done.update((r["row"], r["solution_index"]) for r in records)
