"""Data files as `prmkit eval` splits: each row becomes a chain (prompt, steps, and whatever it carries: step
labels, first error, correctness, answer, PRMBench class, the policy's mean log-prob per token). Raw benchmark
layouts (ProcessBench's problem/steps/label, PRMBench's modified_process) are converted on the fly, and the rows
the conversion skips are counted. Labels are read with one scheme per run (`split_label_scheme`).

`prmkit search`'s output is read as it is (`SearchRows`). What eval compares is a problem's pool of independent
samples, each sample once:
  - a sampling method's row (best-of-n, majority, weighted-best-of-n, ...) gives its `candidates`, the N samples
    the method chose among (the chosen solution at the row's top level is one of them and is not read again);
  - a `--budgets` row gives its `samples`, the max(N) samples every sampling method read the first N of; its
    `greedy` solution (temperature 0) and its `beam` / `dvts` results are other searches, not samples of the pool,
    and are not read;
  - a greedy, beam or dvts row is refused: greedy has one solution per problem, and the beams of a beam or dvts
    search were kept by a PRM, share their first steps and come sorted best first, so best-of-N over them would
    not measure what it says.
Each sample is a chain with its own `steps`, `correct` (against the search's gold answer; null without one),
`answer` and `mean_logprob`; the row's top-level `correct`, `answer` and `mean_logprob` are the chosen
solution's and are not read, and the search PRM's `step_scores` are not used (the evaluated PRM scores the steps).
A problem is the row's `row` (its row number in the searched data) and prompt, so the rows of one search are one
problem each. A file that joins several searches' outputs can hold a problem twice: a later row with the same
samples (sampling methods run with the same n, seed and policy draw the same samples) is skipped, and a note
says so; a later row with other samples (another n, seed, policy, a --budgets run, or a backend that did not
reproduce its samples) is an error, since mixing two pools would compare neither: evaluate each search's output
as a file of its own (`prmkit eval RUN a.jsonl b.jsonl`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from prmkit.data.formats_base import ConversionReport, guess_format
from prmkit.data.records import detect_scheme, normalise_label
from prmkit.data.rows import Row, RowReader
from prmkit.errors import PRMError
from prmkit.evaluation.processbench import first_error_from_labels
from prmkit.scoring.inputs import candidate_steps, parse_row, row_prompt
from prmkit.scoring.scorer import PRMScorer


@dataclass
class Chain:
    prompt: str
    steps: list[str]
    labels: list[float | None] | None = None
    first_error: int | None = None
    correct: bool | None = None
    answer: object = None
    group: str = ""  # chains of one problem (best-of-N)
    title: str = ""
    prmbench_class: str | None = None  # PRMBench's error class (`classification`), e.g. "circular"
    mean_logprob: float | None = None  # the policy's mean log-prob per generated token (`prmkit search` writes it)
    scores: list[float | None] = field(default_factory=list)


@dataclass
class Split:
    name: str
    path: Path
    chains: list[Chain]
    seconds: float = 0.0
    label_scheme: str = "binary"  # how this file's labels were read
    conversion: dict | None = None  # a raw layout's conversion: rows read, converted, skipped (by reason)
    notes: list[str] = field(default_factory=list)  # what the reader decided that the user should know


def load_split(path: str | Path, scorer: PRMScorer, *, limit: int | None = None, name: str | None = None,
               label_scheme: str | None = None) -> Split:
    """Read a data file into chains (`limit` rows evenly spaced, each keeping its row number in the file); a raw
    ProcessBench (or other known) layout is converted first. Labels are read with `label_scheme`, else with the
    run's (see `split_label_scheme`)."""
    path = Path(path)
    numbered, conversion = _converted(evenly_spaced(list(RowReader(path)), limit), path)
    scheme, notes = split_label_scheme([row.value for row in numbered], path, scorer.metadata,
                                       label_scheme, converted=conversion is not None)
    chains: list[Chain] = []
    search = SearchRows(path, scorer.metadata.separator)
    for number, row in ((r.number, r.value) for r in numbered):
        where = f"{path}: row {number}"
        if search_pool(row) is not None:
            chains += search.chains(row, where, number)
            continue
        parsed = parse_row(row, where, scorer.metadata.separator)
        if parsed.kind == "candidates":
            chains += _candidate_chains(row, parsed, where, number)
            continue
        labels = _labels(row, where, scheme, scorer.metadata.neutral_label, len(parsed.steps[0]))
        first_error = row.get("first_error")
        if first_error is None and labels is not None:
            first_error = first_error_from_labels(labels)
        correct = row.get("correct", row.get("final_answer_correct"))
        chains.append(Chain(parsed.prompt, parsed.steps[0], labels, first_error,
                            None if correct is None else bool(correct), row.get("answer"), group=parsed.prompt,
                            title=str(row.get("id", f"row {number}")), prmbench_class=_prmbench_class(row, where),
                            mean_logprob=_mean_logprob(row.get("mean_logprob"), f"{where}, field 'mean_logprob'")))
    counts = None if conversion is None else {
        key: value for key, value in conversion.to_dict().items()
        if key in ("source_format", "rows_read", "rows_converted", "rows_skipped", "skipped")}
    return Split(name or path.stem, path, chains, label_scheme=scheme, notes=notes + search.notes(),
                 conversion=counts)


def chain_lengths(scorer: PRMScorer, chains: list[Chain]) -> list[int]:
    """The tokens each chain takes with every step kept: the max_length that would score all of it."""
    return [len(scorer.tokenize(c.prompt, c.steps, max_length=sys.maxsize).input_ids) for c in chains]


def split_label_scheme(rows: list, path: Path, metadata, given: str | None, *,
                       converted: bool = False) -> tuple[str, list[str]]:
    """The scheme a file's labels are read with, and a note when that reading is a guess. One rule per run, so a
    0 means here what it meant in training: the scheme given (`--label-scheme`), else the run's own
    (`metadata.label_scheme`, resolved from its training data); `auto`, or a run that recorded none, detects
    it per file. Rows converted from a raw benchmark layout hold normalised labels and are always binary."""
    if converted:
        return "binary", []
    wanted = given or metadata.label_scheme or "auto"
    detected = detect_scheme(rows)
    if wanted == "auto":
        return detected, []
    notes = []
    has_zero = any(isinstance(row, dict) and isinstance(row.get("labels"), list)
                   and any(label == 0 and not isinstance(label, bool) for label in row["labels"]) for row in rows)
    if given is None and wanted == "ternary" and detected == "binary" and has_zero:
        notes.append(f"{path}: no label is -1, and the run was trained on -1/0/+1 ratings, so a 0 label is read "
                     f"as a neutral rating ({metadata.neutral_label}); if 0 means a wrong step in this file "
                     "(e.g. one written by prmkit data convert), pass --label-scheme binary")
    return wanted, notes


def _converted(rows: list[Row], path: Path) -> tuple[list[Row], ConversionReport | None]:
    """Rows in a known raw layout (ProcessBench's problem/steps/label) become records, with the conversion's
    report (None for rows that are records already). A conversion that keeps one record per row keeps the row
    numbers; one that merges or skips rows numbers the records in order."""
    first = rows[0].value if rows else None
    source_format = guess_format(first) if isinstance(first, dict) and "prompt" not in first else None
    if not source_format or source_format == "trl":
        return rows, None
    from prmkit.data.convert import convert_rows

    records, report = convert_rows(source_format, [row.value for row in rows], str(path))
    if len(records) == len(rows):
        return [Row(row.number, record) for row, record in zip(rows, records)], report
    return [Row(index + 1, record) for index, record in enumerate(records)], report


def evenly_spaced(rows: list, limit: int | None) -> list:
    """`limit` rows spread evenly through the file, first row included: benchmark files are often sorted (by
    source, or errors first), and a head would not keep their mix. Rows of one problem may be split apart."""
    if limit is None or limit >= len(rows):
        return rows
    if limit < 1:
        raise PRMError(f"limit={limit}; use a positive number of rows")
    return [rows[i * len(rows) // limit] for i in range(limit)]


def _labels(row: dict, where: str, scheme: str, neutral: str, n_steps: int) -> list[float | None] | None:
    labels = row.get("labels")
    if labels is None:
        return None
    if not isinstance(labels, list) or len(labels) != n_steps:
        raise PRMError(f"{where}, field 'labels': expected a list of {n_steps} labels (one per step), "
                       f"got {labels!r:.60}")
    try:
        return [normalise_label(value, scheme, neutral) for value in labels]
    except ValueError as err:
        raise PRMError(f"{where}, field 'labels': {err}") from None


def _prmbench_class(row: dict, where: str) -> str | None:
    value = row.get("prmbench_class")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise PRMError(f"{where}, field 'prmbench_class': expected PRMBench's error class as a string, e.g. "
                       f"'circular', got {value!r:.60}; convert PRMBench rows with `prmkit data convert --from "
                       "prmbench`")
    return value


def _mean_logprob(value, where: str) -> float | None:
    """A sample's mean log-prob per token: a number that is not NaN (a log-prob is at most 0), or null."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value > 0:
        raise PRMError(f"{where}: expected the policy's mean log-prob per token, a number <= 0 (or null when "
                       f"unknown), got {value!r:.60}; write it as `prmkit search` does (logprob / tokens)")
    return float(value)


def _candidate_chains(row: dict, parsed, where: str, number: int) -> list[Chain]:
    n = len(parsed.steps)
    correct = row.get("correct")
    answers = row.get("answers", row.get("answer"))
    confidence = row.get("mean_logprob")
    for key, value in (("correct", correct), ("answers", answers), ("mean_logprob", confidence)):
        if value is not None and (not isinstance(value, list) or len(value) != n):
            raise PRMError(f"{where}, field '{key}': expected a list with one entry per candidate ({n}), "
                           f"got {value!r:.60}")
    return [Chain(parsed.prompt, steps, correct=None if correct is None else bool(correct[i]),
                  answer=None if answers is None else answers[i], group=f"row {number}",
                  title=f"row {number} candidate {i}",
                  mean_logprob=None if confidence is None else _mean_logprob(
                      confidence[i], f"{where}, field 'mean_logprob[{i}]'"))
            for i, steps in enumerate(parsed.steps)]


# A search method whose rows hold no pool of independent samples, and why eval refuses them
NOT_A_POOL = {
    "greedy": "a greedy search writes one solution per problem (temperature 0), so there are no samples of one "
              "problem to compare",
    "beam": "the candidates of a beam search are beams a PRM kept, sharing their first steps and sorted best "
            "first, not independent samples",
    "dvts": "the candidates of a dvts search are subtrees a PRM grew, sorted best first, not independent samples",
}
ROW_LISTS = ("correct", "answers", "mean_logprob")  # a plain candidates row's per-candidate lists


def search_pool(row) -> str | None:
    """The field that holds a `prmkit search` row's samples: `candidates` (a method row: a list of solution dicts)
    or `samples` (a --budgets row); None for any other row."""
    if not isinstance(row, dict):
        return None
    method = row.get("method") if isinstance(row.get("method"), str) else None
    if method == "budgets" or ("samples" in row and not any(k in row for k in ("candidates", "completions",
                                                                                "completion"))):
        return "samples"
    candidates = row.get("candidates")
    if method in NOT_A_POOL or (isinstance(candidates, list) and any(isinstance(c, dict) for c in candidates)):
        return "candidates"
    return None


class SearchRows:
    """`prmkit search` rows of one file as chains: one group per problem, each sample once (the rule is in the
    module docstring). Keeps the problems read so far, to skip a repeated pool and refuse a different one."""

    def __init__(self, path: Path, separator):
        self.path, self.separator = path, separator
        self.first: dict[str, tuple[int, list[list[str]]]] = {}  # problem -> (row it was read from, its samples)
        self.repeated: list[int] = []  # rows skipped: a problem's samples read already
        self.samples = self.graded = 0

    def chains(self, row: dict, where: str, number: int) -> list[Chain]:
        field = search_pool(row)
        method = row.get("method")
        if method in NOT_A_POOL:
            raise PRMError(f"{where}: a `prmkit search --method {method}` row; {NOT_A_POOL[method]}. Evaluate the "
                           "output of a sampling method (--method best-of-n, majority, ...) or of a --budgets run, "
                           "whose rows hold N independent samples of each problem")
        if field not in row:
            raise PRMError(f"{where}: a `prmkit search --budgets` row without 'samples' (its --budget-methods "
                           "include no sampling method); eval compares a problem's samples: run the budgets with a "
                           "sampling method (e.g. best-of-n), or evaluate a sampling method's output")
        prompt = row_prompt(row, where)
        steps, _ = candidate_steps(row[field], where, self.separator, field)
        if not all(isinstance(entry, dict) for entry in row[field]):
            raise PRMError(f"{where}, field '{field}': expected the samples as `prmkit search` writes them (dicts "
                           f"with 'steps', 'correct', 'answer', ...), got {row[field][0]!r:.60}")
        if field == "candidates":
            for key in ROW_LISTS:
                if isinstance(row.get(key), list):
                    raise PRMError(f"{where}, field '{key}': a list beside candidates written as dicts, which carry "
                                   f"their own '{key.rstrip('s')}'; drop the list, or write the candidates as "
                                   "strings or step lists")
        problem = f"data row {row['row']}: {prompt}" if "row" in row else prompt
        if problem in self.first:
            first, pool = self.first[problem]
            if pool == steps:
                self.repeated.append(number)
                return []
            named = f"data row {row['row']}" if "row" in row else "prompt"
            raise PRMError(f"{where}: the problem of row {first} ({named} {prompt!r:.60}) again, with other samples; "
                           "eval compares one pool of samples per problem, each sample once. This file joins the "
                           "outputs of different searches (another n, seed, policy, a --budgets run, or a backend "
                           "that did not reproduce its samples): evaluate each as a file of its own, e.g. "
                           "`prmkit eval RUN a.jsonl b.jsonl`")
        self.first[problem] = (number, steps)
        chains = []
        for i, (entry, chain) in enumerate(zip(row[field], steps)):
            at = f"{where}, field '{field}[{i}]"
            correct = entry.get("correct")
            if correct is not None and not isinstance(correct, bool):
                raise PRMError(f"{at}.correct': expected true, false or null (no gold answer), got {correct!r:.60}")
            chains.append(Chain(prompt, chain, correct=correct, answer=entry.get("answer"), group=problem,
                                title=f"row {number} {field[:-1]} {i}",
                                mean_logprob=_mean_logprob(entry.get("mean_logprob"), f"{at}.mean_logprob'")))
        self.samples += len(chains)
        self.graded += sum(c.correct is not None for c in chains)
        return chains

    def notes(self) -> list[str]:
        notes = []
        if self.repeated:
            rows = ", ".join(map(str, self.repeated[:10])) + (" ..." if len(self.repeated) > 10 else "")
            notes.append(f"{self.path}: {len(self.repeated)} `prmkit search` row(s) ({rows}) hold the same samples "
                         "as an earlier row of the same problem (e.g. the outputs of several sampling methods of one "
                         "search, which share their samples, joined in one file); each sample is read once, from "
                         "the first")
        if self.samples and not self.graded:
            notes.append(f"{self.path}: no sample of these `prmkit search` rows is graded ('correct' is null: the "
                         "problems had no gold answer), so there is no best-of-N; search problems with a "
                         "gold_answer")
        return notes
