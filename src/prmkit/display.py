"""How numbers look in tables, summaries and reports: one rule, so a value reads the same everywhere."""

from __future__ import annotations

import json


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
