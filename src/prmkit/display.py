"""How output looks: numbers in tables, summaries and reports (one rule, so a value reads the same everywhere), the
console commands print to, and the progress bar of the long-running commands (score, label, search)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Callable, Iterator


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


def console(*, stderr: bool = False):
    """A rich console for command output. Lines are never hard-wrapped: piped into a file or grep, a message stays
    on one line whatever the terminal's width (rich would otherwise cut lines at 80 columns when not on a tty)."""
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True)


@contextmanager
def progress_bar(enabled: bool, description: str, *, total: float | None = None, unit: str | None = None,
                 extra: str | None = None, **fields) -> Iterator[Callable[..., None]]:
    """`with progress_bar(...) as update: update(completed=..., advance=..., total=..., field=...)`: a rich bar on
    stderr (stdout stays the command's output), or an update that does nothing when not `enabled` (not a terminal,
    or not rank 0). With a `unit` it counts done of total ("3/8 problems"), else it shows a percentage (`total` in
    bytes, say). `extra` is a rich column template over the task's `fields` ("{task.fields[rows]} rows")."""
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
    bar = Progress(*columns, console=console(stderr=True))
    task = bar.add_task(description, total=total, **fields)
    with bar:
        yield lambda **changes: bar.update(task, **changes)
