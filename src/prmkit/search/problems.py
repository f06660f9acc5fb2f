"""What `prmkit search` reads and where it writes: problems (with gold answers when the data has them) from any
file the row reader takes, and the output JSONL, continued where an earlier run of the same search stopped.

The output is appended a batch of problems at a time and synced to disk, so a killed run loses at most the batch
it was working on. On the next start the rows already there are kept (a last line cut off by the kill is
dropped), checked against this run (same options, policy, PRM, and the same problem at each row number), and
only the problems without a row are searched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prmkit.data.problems import ResumableRows, problem_gold, problem_text, read_problem_rows
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


class Output(ResumableRows):
    """The output JSONL: rows already written (by row number), and appending a batch of new ones. A row carries the
    identity keys (method, options, policy, PRM) at its top level; the options are too long to show in an error, so
    only the names of those that differ are."""

    tool = "prmkit search"
    holds = "one row per problem"
    made = "searched"
    source = "the data"
    show_values = False

    def drawn_by(self, record: dict) -> dict:
        return {key: record.get(key) for key in self.identity}

    def other_row(self, record: dict, problem: Problem | None) -> str | None:
        # a row past this run's problems (a smaller --limit) is kept: it holds no problem this run searches
        return "another problem" if problem is not None and problem.text != record.get("prompt") else None
