"""What a user hands the scorer, turned into (prompt, steps): raw completions cut into steps, chat messages read
as text, and the row layouts of `prmkit score`, `prmkit eval` and the server (a best-of-N row's candidates as
strings, step lists, or `prmkit search`'s solution dicts with their own `steps`). Nothing here needs a loaded
model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence, Union

from prmkit.data.records import Separator, split_steps
from prmkit.errors import PRMError

Candidate = Union[str, Sequence[str]]

MAX_STEPS = 512  # steps of one chain a reward reads; later steps count as cut, as steps past max_length do
MAX_STEP_CHARS = 20_000  # characters of one step; from a longer step on, the chain counts as cut


def bound_steps(steps: Sequence[str], max_steps: int = MAX_STEPS,
                max_step_chars: int = MAX_STEP_CHARS) -> tuple[list[str], int]:
    """The steps of a chain that a reward scores, and how many it leaves unscored: those before the first step
    longer than `max_step_chars`, at most `max_steps` of them. A policy's runaway sample (hundreds of short steps,
    one step of 30,000 characters) then gets a defined reward by the truncation rules at a bounded cost (what is
    left out is never tokenized), never an error that fails the batch it came in. The same rule for the in-process
    reward and the server, so both give one sample the same reward."""
    keep = min(len(steps), max_steps)
    for i, step in enumerate(steps[:keep]):
        if len(step) > max_step_chars:
            keep = i
            break
    return list(steps[:keep]), len(steps) - keep


def prompt_text(value) -> str:
    """The problem text of a prompt: a string, or a chat message list ([{"role", "content"}, ...]) whose last
    user message is the problem (system messages and earlier turns are not what the PRM was trained on)."""
    messages = _messages(value)
    if messages is None:
        return value
    if not messages:
        return ""
    users = [m for m in messages if m.get("role") == "user"]
    return _content_text((users or messages)[-1].get("content"))


def completion_text(value) -> str:
    """The text of a completion: a string, or chat messages whose assistant contents are joined."""
    messages = _messages(value)
    if messages is None:
        return value
    assistants = [m for m in messages if m.get("role") == "assistant"] or messages
    return "\n\n".join(_content_text(m.get("content")) for m in assistants)


def _messages(value) -> list[dict] | None:
    if isinstance(value, str):
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(m, dict) for m in value):
        raise PRMError(f"expected a string or a list of {{'role', 'content'}} messages, got {_short(value)}")
    return list(value)


def _content_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class ParsedRow:
    kind: str  # "record" | "candidates"
    prompt: str
    steps: list[list[str]]  # one step list per chain (one chain for a record)
    split_from_text: bool  # steps were cut from raw strings, so they are written back beside the scores


def parse_row(row, where: str, separator: Separator) -> ParsedRow:
    """The chains of one input row (string completions cut at `separator`, a string or a compiled regex); `where`
    ("file: row N") starts every error message. A `candidates` row is read by `candidate_steps`."""
    prompt = row_prompt(row, where)
    if "candidates" in row:
        steps, from_text = candidate_steps(row["candidates"], where, separator)
        return ParsedRow("candidates", prompt, steps, from_text)
    if isinstance(row.get("completions"), list) and all(isinstance(s, str) for s in row["completions"]):
        return ParsedRow("record", prompt, [row["completions"]], False)
    if isinstance(row.get("completion"), str):
        return ParsedRow("record", prompt, [split_steps(row["completion"], separator)], True)
    raise PRMError(f"{where}: no chain to score; give 'completions' (a list of steps), 'completion' (one string) "
                   "or 'candidates' (a list for best-of-N)")


def row_prompt(row, where: str) -> str:
    """The problem text of an input row's `prompt` (a string or chat messages)."""
    if not isinstance(row, dict):
        raise PRMError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "prompt" not in row:
        raise PRMError(f"{where}: no 'prompt' (keys here: {sorted(row)}); each row needs the problem as 'prompt'")
    try:
        return prompt_text(row["prompt"])
    except PRMError as err:
        raise PRMError(f"{where}, field 'prompt': {err}") from None


def candidate_steps(candidates, where: str, separator: Separator,
                    field: str = "candidates") -> tuple[list[list[str]], bool]:
    """The step lists of a best-of-N row's candidates, and whether they were cut from strings. The candidates are
    all of one style: strings (cut at `separator`) or step lists, or all dicts with their own `steps` (a list of
    step strings), as `prmkit search` writes its solutions; only `steps` is read from a dict here (what else it
    carries, e.g. `correct`, is the reader's: prmkit.evaluation.splits). A row mixing the styles, or a dict
    without `steps`, is an error naming the field and the fix."""
    if not isinstance(candidates, list) or not candidates:
        raise PRMError(f"{where}, field '{field}': expected a non-empty list of strings, step lists or "
                       f"{{'steps': [...]}} solutions, got {_describe(candidates)}")
    dicts = [isinstance(c, dict) for c in candidates]
    if any(dicts) and not all(dicts):
        i = dicts.index(not dicts[0])
        raise PRMError(f"{where}, field '{field}[{i}]': {field}[0] is a {_style(candidates[0])} and {field}[{i}] a "
                       f"{_style(candidates[i])}; write every candidate of a row in one style: all solutions "
                       "with their own 'steps' (as prmkit search writes them), or all strings / step lists")
    steps = []
    for i, candidate in enumerate(candidates):
        if isinstance(candidate, dict):
            chain = candidate.get("steps")
            if not isinstance(chain, list) or not all(isinstance(s, str) for s in chain):
                found = (f"no 'steps' (keys here: {sorted(candidate)[:12]})" if "steps" not in candidate
                         else f"'steps' is {_describe(chain)}")
                raise PRMError(f"{where}, field '{field}[{i}].steps': a candidate written as a dict needs its steps "
                               f"as 'steps', a list of step strings, as prmkit search writes them; {found}")
            steps.append(list(chain))
        elif isinstance(candidate, str):
            steps.append(split_steps(candidate, separator))
        elif isinstance(candidate, list) and all(isinstance(s, str) for s in candidate):
            steps.append(candidate)
        else:
            raise PRMError(f"{where}, field '{field}[{i}]': expected a string, a list of step strings or a dict "
                           f"with 'steps', got {_describe(candidate)}")
    return steps, any(isinstance(c, str) for c in candidates)


def _style(candidate) -> str:
    if isinstance(candidate, dict):
        return "dict (a solution with its own fields)"
    return "string or step list" if isinstance(candidate, (str, list)) else _describe(candidate)


def _describe(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"
