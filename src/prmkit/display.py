"""How output looks: numbers in tables, summaries and reports (one rule, so a value reads the same everywhere), the
console commands print to, and the progress bar of the long-running commands (score, label, search, train)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import IO, Callable, Iterator

from rich.console import Console
from rich.rule import Rule

# Not on a terminal (piped to a log or a file), rich would squeeze a table into 80 columns and cut its cells ("prmb…").
# There, a console is as wide as any table prmkit prints, and only a rule, which fills the whole width, is drawn at
# a terminal's width.
LOG_WIDTH = 10_000
LOG_RULE_WIDTH = 80


def format_value(value, spec: str = ".3f") -> str:
    """'-' for a missing value, floats with `spec`, dicts and lists as JSON, anything else as text."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return format(value, spec)
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class CommandConsole(Console):
    """A console whose output reads whole in a log: off a terminal, tables keep every cell and lines are never
    hard-wrapped, so a message piped into a file or grep stays on one line."""

    def __init__(self, *, stderr: bool = False, file: IO[str] | None = None):
        super().__init__(stderr=stderr, file=file, soft_wrap=True)
        if not self.is_terminal:
            self.width = LOG_WIDTH

    def rule(self, title="", *, characters: str = "─", style="rule.line", align="center") -> None:
        width = None if self.is_terminal else LOG_RULE_WIDTH
        self.print(Rule(title, characters=characters, style=style, align=align), width=width)


def console(*, stderr: bool = False, file: IO[str] | None = None) -> CommandConsole:
    """The console a command prints to: stdout, stderr or `file`."""
    return CommandConsole(stderr=stderr, file=file)


@contextmanager
def progress_bar(enabled: bool, description: str, *, total: float | None = None, unit: str | None = None,
                 extra: str | None = None, transient: bool = False, **fields) -> Iterator[Callable[..., None]]:
    """`with progress_bar(...) as update: update(completed=..., advance=..., total=..., field=...)`: a rich bar on
    stderr (stdout stays the command's output), or an update that does nothing when not `enabled` (not a terminal,
    or not rank 0). With a `unit` it counts done of total ("3/8 problems"), else it shows a percentage (`total` in
    bytes, say). `extra` is a rich column template over the task's `fields` ("{task.fields[rows]} rows"). A `transient`
    bar is erased when it closes."""
    if not enabled:
        yield lambda **changes: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    # The description is the task's, read neither as a column template nor as rich markup: a file name with braces
    # or brackets in it is printed as it is.
    columns = [TextColumn("{task.description}", markup=False), BarColumn()]
    columns += [MofNCompleteColumn(), TextColumn(unit)] if unit else [TaskProgressColumn()]
    if extra:
        columns.append(TextColumn(extra))
    columns.append(TimeRemainingColumn())
    bar = Progress(*columns, console=console(stderr=True), transient=transient)
    task = bar.add_task(description, total=total, **fields)
    with bar:
        yield lambda **changes: bar.update(task, **changes)
