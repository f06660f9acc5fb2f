"""What `prmkit search` reads and where it writes: problems (with gold answers when the data has them) from any
file the row reader takes, and the output JSONL, continued where an earlier run of the same search stopped.

The output is appended a batch of problems at a time and synced to disk, so a killed run loses at most the batch
it was working on. On the next start the rows already there are kept (a last line cut off by the kill is
dropped), checked against this run (same options, policy, PRM, and the same problem at each row number), and
only the problems without a row are searched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prmkit.data.problems import AppendedJsonl, problem_gold, problem_text, read_problem_rows
from prmkit.errors import PRMError
from prmkit.search.options import SearchOptions


@dataclass(frozen=True)
class Problem:
    row: int  # the row number in DATA, as every prmkit command counts rows
    text: str
    gold: str | None  # the gold answer as an answer (GSM8K's "#### N" solution already cut to N)
    id: object = None  # the row's `id`, passed through when it has one


def read_problems(path: str | Path, options: SearchOptions) -> list[Problem]:
    """Every problem of DATA (the first `limit`), or one error listing every bad row."""

    def parse(number: int, value) -> Problem:
        text = problem_text(value, options.problem_field, '{"prompt": ..., "gold_answer": ...}')
        gold = problem_gold(value, options.gold_field, required=False)
        return Problem(row=number, text=text, gold=gold, id=value.get("id"))

    return read_problem_rows(path, parse, limit=options.limit, purpose="searched", expected="one problem per row")


class Output(AppendedJsonl):
    """The output JSONL: rows already written (by row number), and appending a batch of new ones."""

    def __init__(self, path: str | Path, identity: dict, problems: list[Problem], *, overwrite: bool = False):
        super().__init__(path, holds="one row per problem", overwrite=overwrite)
        self.identity = identity
        self.done: dict[int, dict] = {}
        by_row = {p.row: p for p in problems}
        fix = f"give another output path, or pass --overwrite to start {self.path} afresh"
        for number, line in self.lines():
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
            self.done[row["row"]] = row

    def append(self, rows: list[dict]) -> None:
        super().append(rows)
        for row in rows:
            self.done[row["row"]] = row
