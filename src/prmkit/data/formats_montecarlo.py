"""Monte-Carlo-labelled data: Math-Shepherd (hard +/- per step) and MATH-APS / OmegaPRM (soft mc_value per node)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from prmkit.data.formats_base import ConversionReport, RowContext, check_bool
from prmkit.errors import PRMError

STEP_TAG = "ки"  # Math-Shepherd's step marker; the label text has '+' or '-' in its place
STEP_PREFIX = re.compile(r"^Step \d+:\s*")


def convert_math_shepherd(rows: Sequence[Any], source: str, *,
                          strip_step_prefix: bool = False) -> tuple[list[dict], ConversionReport]:
    """`input` = problem + "Step k: ... ки" steps, `label` = the same text with '+'/'-' in place of each tag.

    Prompt = the text before "Step 1:"; steps = the text between tags, stripped, keeping their "Step k:" prefix
    unless `strip_step_prefix`. The label text must equal the input with each tag replaced by one '+' or '-'
    (checked tag by tag, so a '+' inside the maths is never read as a label); rows where it does not are
    skipped and counted.
    """
    check_bool("strip_step_prefix", strip_step_prefix)
    report = ConversionReport("math-shepherd", source, rows_read=len(rows))
    report.choices += [
        "prompt = text before 'Step 1:'; one step per 'ки' tag; '+' -> positive (1.0), '-' -> negative (0.0)",
        "steps keep their 'Step k:' prefix" if not strip_step_prefix
        else "'Step k:' prefixes stripped from the steps (strip_step_prefix=True)",
        "rows whose label text is not the input with each tag replaced by '+'/'-' are skipped",
    ]
    records = []
    for number, row in enumerate(rows, start=1):
        ctx = RowContext(source, "math-shepherd", number, row)
        text, label_text = ctx.get(row, "input", str), ctx.get(row, "label", str)
        record, reason = _shepherd_record(text, label_text, strip_step_prefix)
        if record is None:
            report.skip(reason)
            continue
        if "task" in row:
            record["task"] = row["task"]
        records.append(record)
        report.rows_converted += 1
    report.finish(records)
    return records, report


def _shepherd_record(text: str, label_text: str, strip_step_prefix: bool) -> tuple[dict | None, str]:
    segments = text.split(STEP_TAG)
    if len(segments) == 1:
        return None, "no 'ки' step tag in input"
    signs = _signs_at_tags(segments, label_text)
    if signs is None:
        return None, "'ки' tags and '+'/'-' labels do not line up (count or text differs)"
    if segments[-1].strip():
        return None, "text after the last 'ки' tag"
    start = segments[0].find("Step 1:")
    if start < 0:
        return None, "no 'Step 1:' before the first tag"
    prompt = segments[0][:start].strip()
    steps = [segments[0][start:].strip()] + [s.strip() for s in segments[1:-1]]
    if strip_step_prefix:
        steps = [STEP_PREFIX.sub("", step) for step in steps]
    if not prompt:
        return None, "empty prompt (nothing before 'Step 1:')"
    if any(not step for step in steps):
        return None, "empty step between tags"
    labels = [1.0 if sign == "+" else 0.0 for sign in signs]
    return {"prompt": prompt, "completions": steps, "labels": labels}, ""


def _signs_at_tags(segments: list[str], label_text: str) -> list[str] | None:
    """The '+'/'-' that stands where each tag stood, or None if the label text is not the input with each tag
    replaced by one sign."""
    signs, position = [], 0
    for segment in segments[:-1]:
        if not label_text.startswith(segment, position):
            return None
        position += len(segment)
        sign = label_text[position:position + 1]
        if sign not in ("+", "-"):
            return None
        signs.append(sign)
        position += 1
    return signs if label_text[position:] == segments[-1] else None


def convert_math_aps(rows: Sequence[Any], source: str, *,
                     threshold: float | None = None) -> tuple[list[dict], ConversionReport]:
    """OmegaPRM / MATH-APS rows: `question` and `reasoning_steps[{solution_prefix, mc_value}]`, the nodes of a
    search tree. Each `solution_prefix` is the question plus the solution so far; `mc_value` is the share of
    rollouts from that prefix that reached the right answer.

    A node's parent is the longest other prefix it extends at a whitespace boundary (the question itself is
    the root); its step is the text it adds to the parent, stripped (it may hold several paragraphs). One record
    per leaf: the steps from the root to the leaf. Each node's mc_value labels its step once, in the first leaf
    record (in file order) that passes through it; later records show the step unlabelled, so no node is
    trained on twice. Labels are soft (mc_value in [0, 1]) unless `threshold` is set, then mc_value > threshold
    is positive (1.0), else negative (0.0). The root (question only) has no step: its value is discarded.
    """
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not 0 <= threshold < 1):
        raise PRMError(f"option threshold={threshold} is outside [0, 1); use e.g. 0.5, or leave it unset "
                       "for soft labels")
    report = ConversionReport("math-aps", source, rows_read=len(rows))
    report.choices += [
        "each node's step = the text its solution_prefix adds to its parent's prefix (longest other prefix)",
        "one record per leaf of the search tree; each node's mc_value labels its step once (first leaf record "
        "through it), later records show that step unlabelled",
        "labels: soft, mc_value as is" if threshold is None
        else f"labels: mc_value > {threshold} -> positive (1.0), else negative (0.0)",
        "root node (question only) has no step; its mc_value is discarded",
        "a solution_prefix listed more than once is one node (mc_value averaged where they differ)",
    ]
    records = []
    for number, row in enumerate(rows, start=1):
        ctx = RowContext(source, "math-aps", number, row)
        question = ctx.get(row, "question", str)
        nodes = _read_nodes(ctx, report)
        row_records = _leaf_records(question, nodes, report, threshold)
        if not row_records:
            report.skip("no node with a step below the question")
            continue
        for record in row_records:
            record.update({k: row[k] for k in ("question_id", "final_answer") if k in row})
        records.extend(row_records)
        report.rows_converted += 1
    report.finish(records)
    return records, report


def _read_nodes(ctx: RowContext, report: ConversionReport) -> dict[str, float]:
    """prefix (right-stripped) -> mc_value, in file order. A prefix listed twice is one node; differing values
    are averaged (both estimate the same state)."""
    values: dict[str, list[float]] = {}
    for index, node in enumerate(ctx.get(ctx.row, "reasoning_steps", list)):
        where = f"reasoning_steps[{index}]"
        prefix = ctx.get(node, "solution_prefix", str, name=f"{where}.solution_prefix")
        value = ctx.get(node, "mc_value", (int, float), name=f"{where}.mc_value")
        if not 0 <= value <= 1:
            raise ctx.error(f"{where}.mc_value", f"{value} is outside [0, 1]; a Monte-Carlo value is a share")
        values.setdefault(prefix.rstrip(), []).append(float(value))
    for seen in values.values():
        if len(seen) > 1:
            report.discarded["repeated nodes (same solution_prefix, merged)"] += len(seen) - 1
            if len(set(seen)) > 1:
                report.breakdown["repeated nodes with different mc_value (averaged)"] += 1
    return {prefix: sum(seen) / len(seen) for prefix, seen in values.items()}


def _leaf_records(question: str, nodes: dict[str, float], report: ConversionReport,
                  threshold: float | None) -> list[dict]:
    root = question.rstrip()
    valid = []
    for prefix in nodes:
        if prefix == root:
            report.discarded["root nodes (question only, no step)"] += 1
        elif not prefix.startswith(root):
            report.discarded["nodes whose solution_prefix does not start with the question"] += 1
        else:
            valid.append(prefix)
    by_length = sorted(valid, key=len)
    parents = {prefix: _parent(prefix, root, by_length) for prefix in valid}
    has_child = set(parents.values())
    records, labelled = [], set()
    for leaf in (prefix for prefix in valid if prefix not in has_child):
        chain = [leaf]
        while parents[chain[-1]] != root:
            chain.append(parents[chain[-1]])
        chain.reverse()
        # Keys are right-stripped and a parent is a proper prefix, so every step has text.
        steps = [prefix[len(parents[prefix]):].strip() for prefix in chain]
        labels = [None if prefix in labelled else _aps_label(nodes[prefix], threshold) for prefix in chain]
        labelled.update(chain)
        records.append({"prompt": question.strip(), "completions": steps, "labels": labels})
    return records


def _parent(prefix: str, root: str, by_length: list[str]) -> str:
    """The longest other node this prefix extends at a whitespace boundary, or the question."""
    best = root
    for other in by_length:
        if len(other) >= len(prefix):
            break
        if len(other) > len(best) and prefix.startswith(other) and prefix[len(other)].isspace():
            best = other
    return best


def _aps_label(value: float, threshold: float | None) -> float:
    if threshold is None:
        return value
    return 1.0 if value > threshold else 0.0
