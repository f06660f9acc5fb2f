"""PRM800K (OpenAI, "Let's Verify Step by Step"): the raw label files and the flattened "stepwise-critic" parquet.

Ratings are -1/0/+1; the neutral 0 follows `neutral`. Human-written steps carry no rating: labelers wrote one
only when every model step was wrong and it is a correct step by the instructions, so they count as positive
(`human_steps="unlabelled"` shows them to the model without training on them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.data.formats_base import (
    HUMAN_VALUES,
    ConversionReport,
    RowContext,
    check_bool,
    check_choice,
    has_label,
    neutral_choice,
)
from prmkit.data.records import NeutralPolicy, normalise_label
from prmkit.errors import PRMError

ANSWER_HEADER = "\n\n# Answer\n\n"  # how PRM800K writes a final answer inside a step
FINISH_REASONS = ("solution", "found_error", "give_up", "bad_problem")


def convert_prm800k(rows: Sequence[Any], source: str, *, neutral: NeutralPolicy = "positive",
                    human_steps: str = "positive",
                    skip_finish_reasons: Sequence[str] = ()) -> tuple[list[dict], ConversionReport]:
    """Raw openai/prm800k rows (phase 1 and 2) -> one record per row: the chosen path and its ratings.

    At each step the chain takes the chosen completion, or the human completion where the labeler wrote one.
    Alternative (non-chosen) completions are discarded and counted. Labelling ends at a step with neither; in
    phase 2 that step is the pre-generated step the labeler rated (normally -1, the first error) and is kept
    with its rating, in phase 1 its candidates are discarded like other alternatives. Rows that end early
    (give_up, bad_problem, found_error) keep their rated prefix unless their finish_reason is in
    `skip_finish_reasons`.
    """
    check_choice("human_steps", human_steps, HUMAN_VALUES)
    skip_finish_reasons = _finish_reasons(skip_finish_reasons)
    report = ConversionReport("prm800k", source, rows_read=len(rows))
    report.choices += [
        "chain = the chosen completion of each step, or the human-written completion where there is one",
        neutral_choice(neutral),
        f"human-written steps (no rating) -> {_human_choice(human_steps)}",
        "alternative (non-chosen) completions of a step are discarded (counted under 'discarded')",
        "phase 2: the step where labelling stopped is the pre-generated step, kept with its rating",
        "rows that stop early keep their rated prefix" + (
            f"; rows with finish_reason in {sorted(skip_finish_reasons)} are skipped" if skip_finish_reasons else
            " (give_up, bad_problem and found_error rows included)"),
    ]
    records = []
    for number, row in enumerate(rows, start=1):
        ctx = RowContext(source, "prm800k", number, row)
        prompt = ctx.get(row, "question.problem", str)
        steps = ctx.get(row, "label.steps", list)
        finish = ctx.get(row, "label.finish_reason", str, optional=True)
        report.breakdown[f"finish_reason={finish}"] += 1
        if finish in skip_finish_reasons:
            report.skip(f"finish_reason={finish} (in skip_finish_reasons)")
            continue
        completions, labels = _follow_chosen_path(ctx, steps, report, neutral, HUMAN_VALUES[human_steps])
        if not completions:
            report.skip(f"no chosen step (finish_reason={finish})")
        elif any(not text.strip() for text in completions):
            report.skip("empty step text on the chosen path")
        elif not has_label(labels):
            report.skip(f"no labelled step left (neutral={neutral!r}, human_steps={human_steps!r})")
        else:
            question = row["question"]
            records.append({"prompt": prompt, "completions": completions, "labels": labels, "finish_reason": finish,
                            "generation": row.get("generation"),
                            "ground_truth_answer": question.get("ground_truth_answer")})
            report.rows_converted += 1
    report.finish(records)
    return records, report


def _follow_chosen_path(ctx: RowContext, steps: list, report: ConversionReport, neutral: NeutralPolicy,
                        human_value: float | None) -> tuple[list[str], list[float | None]]:
    texts: list[str] = []
    labels: list[float | None] = []
    pre_generated = ctx.row["question"].get("pre_generated_steps") or []
    for index, step in enumerate(steps):
        where = f"label.steps[{index}]"
        candidates = ctx.get(step, "completions", list, optional=True, name=f"{where}.completions") or []
        chosen = ctx.get(step, "chosen_completion", int, optional=True, name=f"{where}.chosen_completion")
        human = ctx.get(step, "human_completion", dict, optional=True, name=f"{where}.human_completion")
        if chosen is not None:
            if not 0 <= chosen < len(candidates):
                raise ctx.error(f"{where}.chosen_completion",
                                f"index {chosen} but the step has {len(candidates)} completions")
            texts.append(ctx.get(candidates[chosen], "text", str, name=f"{where}.completions[{chosen}].text"))
            labels.append(_rating(ctx, candidates[chosen], f"{where}.completions[{chosen}]", neutral))
            report.discarded["alternative completions (not chosen)"] += len(candidates) - 1
        elif human is not None:
            texts.append(ctx.get(human, "text", str, name=f"{where}.human_completion.text"))
            labels.append(human_value)
            report.breakdown["human-written steps"] += 1
            report.discarded["alternative completions (not chosen)"] += len(candidates)
        else:
            _last_rated_step(ctx, index, candidates, pre_generated, texts, labels, report, neutral)
            report.discarded["steps after the last chosen step"] += len(steps) - index - 1
            break
    return texts, labels


def _last_rated_step(ctx: RowContext, index: int, candidates: list, pre_generated: list, texts: list,
                     labels: list, report: ConversionReport, neutral: NeutralPolicy) -> None:
    """A step with no chosen and no human completion ends the chain. In phase 2 the trajectory is the
    pre-generated solution, so its rated step here is the first error and belongs in the chain."""
    target = pre_generated[index] if index < len(pre_generated) else None
    for position, candidate in enumerate(candidates):
        if target is not None and isinstance(candidate, dict) and candidate.get("text") == target:
            texts.append(target)
            labels.append(_rating(ctx, candidate, f"label.steps[{index}].completions[{position}]", neutral))
            report.breakdown["phase-2 final pre-generated step kept"] += 1
            report.discarded["alternative completions (not chosen)"] += len(candidates) - 1
            return
    report.discarded["candidates of the final unchosen step"] += len(candidates)


def _rating(ctx: RowContext, completion: Any, where: str, neutral: NeutralPolicy) -> float | None:
    rating = ctx.get(completion, "rating", (int, float), optional=True, name=f"{where}.rating")
    try:
        return normalise_label(rating, "ternary", neutral)
    except ValueError as err:
        raise ctx.error(f"{where}.rating", str(err)) from None


def _finish_reasons(value: str | Sequence[str]) -> tuple[str, ...]:
    reasons = (value,) if isinstance(value, str) else tuple(value)
    unknown = [reason for reason in reasons if reason not in FINISH_REASONS]
    if unknown:
        raise PRMError(f"option skip_finish_reasons has unknown value(s) {unknown}; "
                       f"PRM800K's finish reasons are {', '.join(FINISH_REASONS)}")
    return reasons


def _human_choice(human_steps: str) -> str:
    return "positive (1.0)" if human_steps == "positive" else "unlabelled (shown, not trained on)"


@dataclass
class _Trajectory:
    """One labeler's walk through a problem: the accepted steps and the rows that rated candidates on it."""
    instruction: str
    path: list[str]  # accepted steps as `responses` spells them (no answer section)
    texts: list[str] = field(default_factory=list)  # accepted steps as written to the record
    labels: list[float | None] = field(default_factory=list)
    preferred_rows: int = 0
    is_solution: bool = False
    alternatives: list[dict] = field(default_factory=list)

    def continues(self, row: dict) -> bool:
        """Whether `row` rates a candidate on this walk: its prefix is the walk so far (the next step is open)
        or the walk minus its last step (another candidate for the step just accepted)."""
        prefix, depth = row["responses"], len(row["responses"])
        if row["instruction"] != self.instruction or prefix != self.path[:depth]:
            return False
        if row["is_preferred_response"]:
            return depth == len(self.path)
        return depth in (len(self.path), len(self.path) - 1)


def convert_prm800k_stepwise(rows: Sequence[Any], source: str, *, neutral: NeutralPolicy = "positive",
                             human_steps: str = "positive",
                             attach_answer: bool = True) -> tuple[list[dict], ConversionReport]:
    """Flattened "stepwise-critic" rows (one rated candidate next step per row, given the accepted prefix
    `responses`) -> records that carry each rating exactly once.

    Rows come in walks: consecutive rows of one problem whose prefix grows by the preferred candidate. Each walk
    gives one chain record (the preferred steps, each labelled with its own rating) and one record per other
    rated candidate: prefix + [candidate], the prefix unlabelled because the chain already trains on it. Rows
    without a rating are human corrections (kept as chain steps, `human_steps`), human corrections the labeler
    did not keep, and unrated candidates; the last two are skipped and counted. With `attach_answer` a step's
    `answer` is put back as PRM800K writes it ("\\n\\n# Answer\\n\\n<answer>").
    """
    check_choice("human_steps", human_steps, HUMAN_VALUES)
    check_bool("attach_answer", attach_answer)
    report = ConversionReport("prm800k-stepwise", source, rows_read=len(rows))
    report.choices += [
        "one chain record per labelling walk (rows of one problem whose prefix grows by the preferred candidate):"
        " the preferred steps, each labelled with its rating",
        "one record per other rated candidate: prefix + [candidate], prefix steps unlabelled (the chain record "
        "trains on them), so every rating is used exactly once",
        neutral_choice(neutral),
        f"human-written steps (rating null) on the chain -> {_human_choice(human_steps)}",
        "answer sections " + ("re-attached to their step as '\\n\\n# Answer\\n\\n<answer>'" if attach_answer
                              else "left off (attach_answer=False)"),
    ]
    records: list[dict] = []
    walk: _Trajectory | None = None
    for number, row in enumerate(rows, start=1):
        _check_stepwise_row(RowContext(source, "prm800k-stepwise", number, row))
        if walk is None or not walk.continues(row):
            _close_walk(walk, records, report, neutral)
            walk = _Trajectory(row["instruction"], list(row["responses"]), texts=list(row["responses"]),
                               labels=[None] * len(row["responses"]))
            if row["responses"]:
                report.breakdown["walks starting after an unrated prefix"] += 1
        _add_row(walk, row, report, neutral, HUMAN_VALUES[human_steps], attach_answer)
    _close_walk(walk, records, report, neutral)
    report.finish(records)
    return records, report


def _check_stepwise_row(ctx: RowContext) -> None:
    ctx.get(ctx.row, "instruction", str)
    responses = ctx.get(ctx.row, "responses", list)
    if not all(isinstance(step, str) for step in responses):
        raise ctx.error("responses", "expected a list of strings (the accepted steps so far)")
    ctx.get(ctx.row, "next_response", str)
    ctx.get(ctx.row, "is_preferred_response", bool)
    ctx.get(ctx.row, "is_human_response", bool, optional=True)
    rating = ctx.get(ctx.row, "rating", (int, float), optional=True)
    if rating is not None and rating not in (-1, 0, 1):
        raise ctx.error("rating", f"{rating!r} is not a PRM800K rating; expected -1, 0, +1 or null")
    ctx.get(ctx.row, "answer", str, optional=True)


def _add_row(walk: _Trajectory, row: dict, report: ConversionReport, neutral: NeutralPolicy,
             human_value: float | None, attach_answer: bool) -> None:
    human = bool(row.get("is_human_response"))
    text = row["next_response"]
    if attach_answer and row.get("answer"):
        text += ANSWER_HEADER + row["answer"]
    label = human_value if human else normalise_label(row["rating"], "ternary", neutral)
    if row["is_preferred_response"]:
        walk.path.append(row["next_response"])
        walk.texts.append(text)
        walk.labels.append(label)
        walk.preferred_rows += 1
        walk.is_solution = walk.is_solution or bool(row.get("is_solution"))
        report.breakdown["human-written steps on a chain" if human else "rated steps on a chain"] += 1
    elif human:
        report.skip("human-written step the labeler did not keep (not preferred)")
    elif row["rating"] is None:
        report.skip("candidate without a rating (rating null, not human-written)")
    elif label is None:
        report.skip(f"neutral rating with neutral={neutral!r}: no labelled step left")
    elif not text.strip():
        report.skip("empty candidate step")
    else:
        depth = len(row["responses"])
        record = {"prompt": row["instruction"], "completions": list(row["responses"]) + [text],
                  "labels": [None] * depth + [label], "kind": "alternative"}
        if row.get("error_reason"):
            record["error_reason"] = row["error_reason"]
        walk.alternatives.append(record)
        report.rows_converted += 1


def _close_walk(walk: _Trajectory | None, records: list[dict], report: ConversionReport,
                neutral: NeutralPolicy) -> None:
    if walk is None:
        return
    if walk.preferred_rows:
        if not has_label(walk.labels):
            report.skip(f"preferred step with no label left (neutral={neutral!r})", walk.preferred_rows)
        elif any(not text.strip() for text in walk.texts):
            report.skip("empty step on a chain", walk.preferred_rows)
        else:
            records.append({"prompt": walk.instruction, "completions": walk.texts, "labels": walk.labels,
                            "kind": "chain", "is_solution": walk.is_solution})
            report.rows_converted += walk.preferred_rows
            report.breakdown["chain records"] += 1
    records.extend(walk.alternatives)
