"""TRL's stepwise dataset recipes, which left TRL with its PRMTrainer: trl-lib/math_shepherd and trl-lib/prm800k
as TRL's scripts built them (examples/datasets/math_shepherd.py and prm800k.py), row for row, with bool labels.

These reproduce TRL's processing, quirks included, so a dataset built here equals the one TRL's users trained on:
Math-Shepherd keeps the "Step k:" prefixes and drops one label of a dozen known mis-annotated prompts; PRM800K
labels a step True only for rating +1 (the neutral 0, -1 and an unrated candidate are all False), writes every
non-chosen rated candidate as a chain of its own (prefix + candidate), and ends each row with its chosen path. A row
where TRL's script would have stopped with an error is skipped here and counted with the reason. prmkit's own
converters (`prmkit.data.convert`) make other choices (PRM800K's neutral policy, unlabelled prefixes); these
recipes are for matching TRL.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from itertools import chain
from typing import Any, Callable, Iterator, Sequence

from prmkit.data.formats_base import ConversionReport, guess_format
from prmkit.data.formats_prm800k import ANSWER_HEADER
from prmkit.errors import PRMError

STEP_TAG = "ки"
TAG_STAND_IN = "ⶻ"  # one character in place of the two of "ки", so an index in the input is one in the label text
# Prompts of peiyi9979/Math-Shepherd with a tag inside the problem text: TRL drops their first label and keeps the
# text as it is split.
MISANNOTATED_PROMPTS = ("Mr. Rocky", "Parker", "What is the smallest positive", " The Myth", "Let $\\mathbf{a}$",
                        "Find the arithmetic", "Determine an ordered pair", "Determine the ordered pair",
                        "At the Quill and Scroll stationery", "Round to the nearest", r"Calculate $\sqrt{10p}",
                        r"Simplify $\sqrt{28x}")
STOPS_TRL = "TRL's script stops here"


class Skip(Exception):
    """A row TRL's script could not process; the message is the reason counted in the report."""


def math_shepherd_row(row: dict) -> dict:
    """One peiyi9979/Math-Shepherd row (`input` with "ки" after each step, `label` with '+'/'-' in their place)
    as TRL's math_shepherd.py processes it."""
    inputs, label_text = row["input"].replace(STEP_TAG, TAG_STAND_IN), row["label"]
    indexes = [m.start() for m in re.finditer(TAG_STAND_IN, inputs)]
    if not indexes:
        raise Skip(f"no 'ки' step tag in input ({STOPS_TRL})")
    if not all(index < len(label_text) and label_text[index] in "+-" for index in indexes):
        raise Skip(f"a 'ки' tag without '+' or '-' at its place in label ({STOPS_TRL})")
    labels = [label_text[index] == "+" for index in indexes]
    # The text before each tag, the prompt (with the first step still in it) first; the text after the last tag
    # is dropped.
    segments = [inputs[i:j] for i, j in zip(chain([0], indexes), chain(indexes, [None]))][:-1]
    prompt, completions = segments[0], [segment[1:].strip() for segment in segments[1:]]
    if prompt.startswith(MISANNOTATED_PROMPTS):
        labels = labels[1:]
    else:
        prompt, first_step = _split_first_step(prompt)
        completions = [first_step.strip()] + completions
    return {"prompt": prompt.strip(), "completions": completions, "labels": labels}


def _split_first_step(prompt: str) -> tuple[str, str]:
    """TRL's split of the problem from the first step: at "Step 1:", else "step 1:", else the question mark; the
    split must give exactly two parts (TRL unpacks two)."""
    for marker in ("Step 1:", "step 1:"):
        if marker in prompt:
            parts = prompt.split(marker)
            if len(parts) != 2:
                raise Skip(f"'{marker}' more than once before the first tag ({STOPS_TRL})")
            return parts[0], marker + parts[1]
    if "?" in prompt:
        parts = prompt.split("?")
        if len(parts) != 2:
            raise Skip(f"no 'Step 1:' and more than one '?' before the first tag ({STOPS_TRL})")
        return parts[0] + "?", parts[1]
    raise Skip(f"no 'Step 1:', 'step 1:' or '?' before the first tag ({STOPS_TRL})")


def prm800k_rows(row: dict) -> list[dict]:
    """One raw openai/prm800k row as TRL's prm800k.py processes it: a chain per non-chosen candidate (the chosen
    path so far + that candidate), then the chosen path (chosen completions, or the human one, labelled True)."""
    prompt = row["question"]["problem"]
    outputs, texts, labels = [], [], []
    for number, step in enumerate(row["label"]["steps"]):
        completions, chosen, human = step.get("completions"), step.get("chosen_completion"), \
            step.get("human_completion")
        if completions is None and human is None and chosen is None:
            break
        if completions is None:
            raise Skip(f"step {number} has a human completion but no completions list ({STOPS_TRL})")
        for index, completion in enumerate(completions):
            if index != chosen:
                outputs.append({"prompt": prompt, "completions": texts + [completion["text"]],
                                "labels": labels + [completion.get("rating") == 1]})
        if chosen is not None:
            if not 0 <= chosen < len(completions):
                raise Skip(f"step {number}: chosen_completion {chosen} of {len(completions)} ({STOPS_TRL})")
            texts, labels = texts + [completions[chosen]["text"]], labels + [completions[chosen].get("rating") == 1]
        elif human is not None:
            texts, labels = texts + [human["text"]], labels + [True]
        else:
            break
    outputs.append({"prompt": prompt, "completions": texts, "labels": labels})
    return outputs


def prm800k_stepwise_rows(rows: Sequence[dict], report: ConversionReport) -> list[dict]:
    """The same recipe on PRM800K's flattened "stepwise-critic" rows (one rated candidate per row, given the
    accepted steps `responses`), for where only that layout is at hand. A labeller's walk is the run of rows of
    one problem whose prefix grows by the preferred candidate; each non-preferred candidate becomes prefix +
    candidate, each walk ends with its preferred path. Answer sections go back into their step as PRM800K writes
    them. A walk that starts after steps it never rated (their labels are not in the file) is skipped."""
    outputs: list[dict] = []
    walk: dict | None = None
    for row in rows:
        if walk is None or not _continues(walk, row):
            _close(walk, outputs, report)
            walk = {"prompt": row["instruction"], "path": list(row["responses"]), "texts": [], "labels": [],
                    "rows": 0, "unrated_prefix": bool(row["responses"])}
        walk["rows"] += 1
        text = row["next_response"] + (ANSWER_HEADER + row["answer"] if row.get("answer") else "")
        human = bool(row.get("is_human_response"))
        label = True if human else row.get("rating") == 1
        if row["is_preferred_response"]:
            walk["path"].append(row["next_response"])
            walk["texts"].append(text)
            walk["labels"].append(label)
        elif walk["unrated_prefix"]:
            continue
        elif human:  # in the raw file a step's human completion is the chosen path or nothing; never a candidate
            report.discarded["human-written steps not on the chosen path"] += 1
        else:
            depth = len(row["responses"])
            outputs.append({"prompt": walk["prompt"], "completions": walk["texts"][:depth] + [text],
                            "labels": walk["labels"][:depth] + [label]})
    _close(walk, outputs, report)
    return outputs


def _continues(walk: dict, row: dict) -> bool:
    """Whether `row` rates a candidate on this walk: its prefix is the walk so far (the next step is open), or, for
    a non-preferred candidate, the walk minus its last step (another candidate for the step just accepted)."""
    depth, path = len(row["responses"]), walk["path"]
    if row["instruction"] != walk["prompt"] or list(row["responses"]) != path[:depth]:
        return False
    return depth == len(path) or (not row["is_preferred_response"] and depth == len(path) - 1)


def _close(walk: dict | None, outputs: list[dict], report: ConversionReport) -> None:
    if walk is None:
        return
    if walk["unrated_prefix"]:
        report.skip("walk starting after steps it never rated (their labels are not in this layout)", walk["rows"])
        return
    outputs.append({"prompt": walk["prompt"], "completions": walk["texts"], "labels": walk["labels"]})


def build(recipe: str, rows: Sequence[Any], source: str) -> tuple[list[dict], ConversionReport]:
    """TRL's rows for one split's source rows, and a report of what was read, written and skipped."""
    if recipe not in RECIPES:
        raise PRMError(f"unknown recipe '{recipe}'; use one of {', '.join(RECIPES)}")
    if not rows:
        raise PRMError(f"{source}: no rows; check that this is the right file")
    layout = guess_format(rows[0])
    expected = ("math-shepherd",) if recipe == "math-shepherd" else ("prm800k", "prm800k-stepwise")
    if layout not in expected:
        other = {"math-shepherd": "math-shepherd", "prm800k": "prm800k", "prm800k-stepwise": "prm800k"}.get(layout)
        fix = f"build it with the {other} recipe" if other else "check the input file"
        keys = sorted(rows[0])[:8] if isinstance(rows[0], dict) else type(rows[0]).__name__
        raise PRMError(f"{source}: rows look like {layout or 'an unknown layout'} (keys {keys}), but the {recipe} "
                       f"recipe reads {' or '.join(expected)} rows; {fix}")
    report = ConversionReport(f"trl recipe {recipe}", source, rows_read=len(rows))
    report.choices += CHOICES[layout]
    if layout == "prm800k-stepwise":
        with _layout_errors(source, layout, "the row of a walk"):
            outputs = prm800k_stepwise_rows(rows, report)
        report.rows_converted = report.rows_read - report.rows_skipped
    else:
        process: Callable[[dict], Any] = math_shepherd_row if layout == "math-shepherd" else prm800k_rows
        outputs = []
        for number, row in enumerate(rows, start=1):
            try:
                with _layout_errors(source, layout, f"row {number}"):
                    got = process(row)
            except Skip as reason:
                report.skip(str(reason))
                continue
            outputs.extend(got if isinstance(got, list) else [got])
            report.rows_converted += 1
    report.finish(outputs)
    return outputs, report


@contextmanager
def _layout_errors(source: str, layout: str, where: str) -> Iterator[None]:
    """A field missing or of the wrong type deep in a row: say where, instead of a bare KeyError."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError) as err:
        raise PRMError(f"{source}: {where}: not in the {layout} layout ({type(err).__name__}: {err}); check that "
                       f"this is the raw {layout} file, unmodified") from None


RECIPES = ("math-shepherd", "prm800k")
CHOICES = {
    "math-shepherd": [
        "steps = the text between 'ки' tags, stripped, 'Step k:' prefixes kept; '+' -> True, '-' -> False",
        "prompt = the text before 'Step 1:' (else 'step 1:', else up to the '?'), stripped",
        f"{len(MISANNOTATED_PROMPTS)} known prompts with a tag inside the problem: first label dropped, text kept",
    ],
    "prm800k": [
        "label True only for rating +1; the neutral 0, -1 and an unrated candidate -> False",
        "each non-chosen candidate -> a row of its own: the chosen path so far + that candidate",
        "each source row ends with its chosen path (a human-written step counts as True); a row whose first step "
        "has nothing chosen gives a row with no steps, as TRL's does",
    ],
    "prm800k-stepwise": [
        "the prm800k recipe on the flattened stepwise-critic layout: walks of rows rebuilt into source rows",
        "label True only for rating +1 (a human-written step on the path: True); 0, -1 and unrated -> False",
        "each non-preferred candidate -> a row: the preferred path so far + that candidate; each walk ends with "
        "its preferred path; answer sections re-attached as '\\n\\n# Answer\\n\\n<answer>'",
    ],
}
