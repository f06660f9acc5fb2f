"""What `prmkit label` reads (problems with gold answers, and optionally the solutions to label) and where it
writes (the output JSONL, continued where a killed run stopped).

A row holds the problem and its gold answer (`prmkit.data.problems` says where each is looked for). It may also
hold one solution to label: `completions`, a list of steps (the record layout), or `solution`, one string cut into
steps at the delimiter. With `solutions` set, the command samples that many
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

import itertools
from dataclasses import dataclass
from pathlib import Path

from prmkit.data.problems import ResumableRows, problem_gold, problem_text, read_problem_rows, short
from prmkit.data.records import split_steps
from prmkit.errors import PRMError
from prmkit.labeling.options import LabelOptions

SOLUTION_FIELDS = ("completions", "solution")


@dataclass(frozen=True)
class Problem:
    index: int  # 0-based position among the problems read (decides its batch)
    row: int  # the row number in the input, as every prmkit command counts rows
    text: str
    gold: str
    steps: tuple[str, ...] | None  # the row's own solution, cut into steps; None when solutions are sampled
    id: object = None  # the row's `id`, passed through when it has one


def read_problems(path: str | Path, options: LabelOptions) -> list[Problem]:
    """Every problem of the input (the first `limit`), or one error listing every bad row."""
    count = itertools.count()  # a Problem's index counts the good rows only

    def parse(number: int, value) -> Problem:
        text = problem_text(value, options.problem_field, '{"problem": ..., "answer": ...}')
        gold = problem_gold(value, options.gold_field, required=True)
        steps = None if options.solutions is not None else _steps(value, options.delimiter)
        return Problem(index=next(count), row=number, text=text, gold=gold, steps=steps, id=value.get("id"))

    return read_problem_rows(path, parse, limit=options.limit, purpose="labelled", lenient=True,
                             expected="one problem and its gold answer per row")


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
        raise PRMError(f"field '{name}': expected a list of step strings or one string, got {short(solution)}")
    if not steps:
        raise PRMError(f"field '{name}': the solution has no steps; give at least one non-empty step")
    return tuple(steps)


# provenance that measures a record instead of deciding it
VOLATILE = ("rollouts", "tokens", "finish_reasons", "solution_tokens", "solution_finish_reason")


class Output(ResumableRows):
    """The output: (row, solution_index) of every record already written, and appending a batch of new ones. A
    record's settings are its `label` provenance, compared on this run's identity keys."""

    tool = "prmkit label"
    holds = "one record per solution"
    made = "labelled"
    needs = ("row", "solution_index", "label")
    keeps_lines = False  # records carry rollouts; which ones exist is all a resumed run needs

    def drawn_by(self, record: dict) -> dict | None:
        provenance = record["label"]
        return {name: provenance.get(name) for name in self.identity} if isinstance(provenance, dict) else None

    def other_row(self, record: dict, problem: Problem | None) -> str | None:
        # unlike search, a record past the input's rows is refused: `last_batch` places every record in a batch
        return "another problem" if problem is None or problem.text != record.get("prompt") else None

    def key(self, record: dict) -> tuple[int, int]:
        return record["row"], record["solution_index"]

    def last_batch(self, problems: list[Problem], per_batch: int) -> int:
        """The batch of the last record written (-1 when none): batches before it are complete."""
        index = {p.row: p.index for p in problems}
        return max((index[row] // per_batch for row, _ in self.done), default=-1)
