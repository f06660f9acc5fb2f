"""`prmkit eval`: score labelled data with a trained PRM and report step metrics, the ProcessBench first-error
protocol, PRMBench's PRMScore and best-of-N accuracy, as a table, metrics.json, an HTML page of chains and PNG
plots.

What each row contributes:
  labels                       step metrics (AUROC, accuracy/precision/recall/F1 at the threshold, MSE, ECE);
  first_error (or labels)      ProcessBench: predicted first error = first step scoring below the threshold;
  correct/final_answer_correct best-of-N, for rows that share a prompt (or a candidates row with a `correct`
                               list); majority vote where every candidate has an `answer`;
  prmbench_class (and labels)  PRMBench: PRMScore overall, per error class and per dimension.
Raw ProcessBench files (`problem`, `steps`, `label`) and raw PRMBench files (`modified_process`, `error_steps`,
`classification`) are converted on the fly, as `prmkit data convert` would.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from prmkit.data.formats_base import ConversionReport, guess_format
from prmkit.data.records import detect_scheme, normalise_label
from prmkit.data.rows import Row, RowReader
from prmkit.errors import PRMError
from prmkit.evaluation.metrics import best_of_n_metrics, step_metrics
from prmkit.evaluation.options import EvalOptions
from prmkit.evaluation.prmbench import DEFAULT_THRESHOLD as PRMBENCH_THRESHOLD
from prmkit.evaluation.prmbench import prmbench_metrics
from prmkit.evaluation.processbench import (
    average_f1,
    calibrate_threshold,
    evaluate_threshold,
    first_error_from_labels,
    predict_first_error,
)
from prmkit.files import write_json_atomic
from prmkit.scoring.aggregate import AGGREGATIONS, aggregate
from prmkit.scoring.inputs import parse_row
from prmkit.scoring.options import ScoringOptions
from prmkit.scoring.scorer import PRMScorer

DEFAULT_THRESHOLD = 0.5  # a probability midpoint for bce; for mse, the midpoint of the 0/1 step labels


@dataclass(frozen=True)
class Threshold:
    value: float
    source: str  # "default", "--threshold" or "calibrated on FILE"
    calibration_f1: float | None = None


@dataclass
class EvalResult:
    """Everything `prmkit eval` measured; `to_dict()` is metrics.json."""
    run: str
    device: str
    dtype: str
    loss: str
    max_length: int
    threshold: Threshold
    splits: dict[str, dict]  # per split: rows, timing, step metrics, processbench, prmbench, best_of_n
    processbench_average_f1: float | None
    out: Path
    outputs: dict[str, str | None]  # report, roc, calibration, training_loss -> file written (None: not made)
    load_seconds: float
    total_seconds: float

    def to_dict(self) -> dict:
        threshold = {k: v for k, v in asdict(self.threshold).items() if v is not None}
        return {"run": self.run, "device": self.device, "dtype": self.dtype, "loss": self.loss,
                "max_length": self.max_length, "threshold": threshold, "splits": self.splits,
                "processbench_average_f1": self.processbench_average_f1,
                "seconds": {"load": self.load_seconds, "total": self.total_seconds}, "out": str(self.out),
                "outputs": self.outputs}


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
    scores: list[float | None] = field(default_factory=list)


@dataclass
class Split:
    name: str
    path: Path
    chains: list[Chain]
    seconds: float = 0.0
    label_scheme: str = "binary"  # how this file's labels were read
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
    for number, row in ((r.number, r.value) for r in numbered):
        where = f"{path}: row {number}"
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
                            title=str(row.get("id", f"row {number}")), prmbench_class=_prmbench_class(row, where)))
    return Split(name or path.stem, path, chains, label_scheme=scheme, notes=notes)


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


def _candidate_chains(row: dict, parsed, where: str, number: int) -> list[Chain]:
    n = len(parsed.steps)
    correct = row.get("correct")
    answers = row.get("answers", row.get("answer"))
    for key, value in (("correct", correct), ("answers", answers)):
        if value is not None and (not isinstance(value, list) or len(value) != n):
            raise PRMError(f"{where}, field '{key}': expected a list with one entry per candidate ({n}), "
                           f"got {value!r:.60}")
    return [Chain(parsed.prompt, steps, correct=None if correct is None else bool(correct[i]),
                  answer=None if answers is None else answers[i], group=f"row {number}",
                  title=f"row {number} candidate {i}") for i, steps in enumerate(parsed.steps)]


def score_split(scorer: PRMScorer, split: Split) -> Split:
    started = time.perf_counter()
    for chain, scores in zip(split.chains, scorer.score_many([(c.prompt, c.steps) for c in split.chains])):
        chain.scores = scores
    split.seconds = time.perf_counter() - started
    return split


def step_pairs(split: Split) -> tuple[list[float], list[float]]:
    """(scores, labels) over steps that have both."""
    scores, labels = [], []
    for chain in split.chains:
        for score, label in zip(chain.scores, chain.labels or []):
            if score is not None and label is not None:
                scores.append(score)
                labels.append(label)
    return scores, labels


def first_error_chains(split: Split) -> list[Chain]:
    return [c for c in split.chains if c.first_error is not None]


def best_of_n_groups(split: Split) -> list[dict]:
    """Problems with at least two candidates whose correctness is known."""
    grouped: dict[str, list[Chain]] = {}
    for chain in split.chains:
        if chain.correct is not None:
            grouped.setdefault(chain.group, []).append(chain)
    groups = []
    for chains in grouped.values():
        if len(chains) >= 2:
            answers = [c.answer for c in chains]
            texts = None if any(a is None for a in answers) else [_answer_text(a) for a in answers]
            groups.append({"correct": [c.correct for c in chains], "answers": texts,
                           "scores": {how: [aggregate(c.scores, how) for c in chains] for how in AGGREGATIONS}})
    return groups


def _answer_text(answer: object) -> str:
    """A row's `answer` as text for the vote: a JSON number as written (1000.0 and "1,000" then vote together),
    a string as it is, anything else as JSON."""
    if isinstance(answer, str):
        return answer
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return str(answer)
    return json.dumps(answer)


def split_metrics(split: Split, threshold: float) -> dict:
    scores, labels = step_pairs(split)
    chains = first_error_chains(split)
    result: dict = {"rows": len(split.chains), "label_scheme": split.label_scheme,
                    "score_seconds": round(split.seconds, 2),
                    "chains_per_s": round(len(split.chains) / split.seconds, 2) if split.seconds else None,
                    "steps_unscored": sum(s is None for c in split.chains for s in c.scores),
                    "step": step_metrics(scores, labels, threshold) if scores else None}
    if chains:
        step_scores, gold = [c.scores for c in chains], [c.first_error for c in chains]
        result["processbench"] = evaluate_threshold(step_scores, gold, threshold)
        oracle = calibrate_threshold(step_scores, gold)
        result["processbench"]["oracle_threshold"] = oracle["threshold"]
        result["processbench"]["oracle_f1"] = oracle["f1"]
    bench = [c for c in split.chains if c.prmbench_class is not None]
    if bench:
        result["prmbench"] = prmbench_metrics(
            [c.prmbench_class for c in bench], [c.scores for c in bench],
            [c.labels if c.labels is not None else [None] * len(c.scores) for c in bench],
            PRMBENCH_THRESHOLD)  # the protocol's fixed 0.5, so scores compare with PRMBench's leaderboard
    groups = best_of_n_groups(split)
    result["best_of_n"] = best_of_n_metrics(groups, list(AGGREGATIONS)) if groups else None
    return result


def choose_threshold(threshold: float | None, calibration: Split | None) -> Threshold:
    if calibration is not None:
        chains = first_error_chains(calibration)
        if not chains:
            raise PRMError(f"--calibrate-on {calibration.path}: no row has 'first_error' or step labels; "
                           "calibrate on ProcessBench-style data")
        found = calibrate_threshold([c.scores for c in chains], [c.first_error for c in chains])
        return Threshold(found["threshold"], f"calibrated on {calibration.path}", found["f1"])
    if threshold is not None:
        return Threshold(float(threshold), "--threshold")
    return Threshold(DEFAULT_THRESHOLD, "default")


def evaluate(run: str | Path, data: list[str | Path], options: EvalOptions = EvalOptions(),
             scoring: ScoringOptions = ScoringOptions(), progress=print) -> EvalResult:
    """Evaluate a run folder, checkpoint or merged export on data files; writes metrics.json, report.html and
    PNG plots into `options.out` (default RUN/eval/<data stems>) and returns what it measured."""
    if not data:
        raise PRMError("no data file given; pass at least one labelled file, e.g. processbench gsm8k.jsonl")
    started = time.perf_counter()
    scorer = PRMScorer.from_options(run, scoring)
    load_s = time.perf_counter() - started
    splits = []
    for path, name in zip(data, _unique_names(data)):
        split = load_split(path, scorer, limit=options.limit, name=name, label_scheme=options.label_scheme)
        for note in split.notes:
            progress(f"note: {note}")
        progress(f"scoring {split.name}: {len(split.chains)} chains on {scorer.device} "
                 f"({str(scorer.dtype).replace('torch.', '')})")
        splits.append(score_split(scorer, split))
    calibration = None
    if options.calibrate_on is not None:
        same = [s for s in splits if s.path.resolve() == Path(options.calibrate_on).resolve()]
        calibration = same[0] if same else score_split(scorer, load_split(
            options.calibrate_on, scorer, limit=options.limit, label_scheme=options.label_scheme))
    chosen = choose_threshold(options.threshold, calibration)

    per_split = {s.name: split_metrics(s, chosen.value) for s in splits}
    pb = {name: m["processbench"] for name, m in per_split.items() if m.get("processbench")}
    target = Path(options.out) if options.out else Path(run) / "eval" / "+".join(s.name for s in splits)
    result = EvalResult(run=str(run), device=str(scorer.device), dtype=str(scorer.dtype).replace("torch.", ""),
                        loss=scorer.metadata.loss, max_length=scorer.metadata.max_length, threshold=chosen,
                        splits=per_split, processbench_average_f1=average_f1(pb) if pb else None, out=target,
                        outputs={}, load_seconds=round(load_s, 2), total_seconds=0.0)
    result.outputs = write_outputs(result, splits, options.report_chains)
    result.total_seconds = round(time.perf_counter() - started, 2)
    write_json_atomic(target / "metrics.json", result.to_dict())
    return result


def write_outputs(result: EvalResult, splits: list[Split], max_report_chains: int) -> dict[str, str | None]:
    from prmkit.evaluation.report import plot_calibration, plot_roc, plot_training_loss, write_chain_report

    target, run = result.out, result.run
    target.mkdir(parents=True, exist_ok=True)
    threshold = result.threshold.value
    series = {s.name: step_pairs(s) for s in splits}
    series = {name: pair for name, pair in series.items() if pair[0]}
    chains = []
    for split in splits:
        for chain in split.chains[:max_report_chains]:
            chains.append({"prompt": chain.prompt, "steps": chain.steps, "scores": chain.scores,
                           "labels": chain.labels, "first_error": chain.first_error,
                           "predicted_first_error": predict_first_error(chain.scores, threshold),
                           "title": f"{split.name} · {chain.title}", "score": aggregate(chain.scores, "min")})
    summary = {"run": str(run), "threshold": f"{threshold:.4g} ({result.threshold.source})"}
    for name, m in result.splits.items():
        shown = min(m["rows"], max_report_chains)
        summary[f"{name}: chains shown"] = f"{shown} of {m['rows']}"
        if m.get("processbench"):
            summary[f"{name}: ProcessBench F1"] = m["processbench"]["f1"]
        if m.get("prmbench"):
            summary[f"{name}: PRMBench PRMScore"] = m["prmbench"]["overall"]["prmscore"]
        if m.get("step"):
            summary[f"{name}: step AUROC"] = m["step"]["auroc"]
    outputs = {"report": write_chain_report(target / "report.html", chains, title=f"prmkit eval: {run}",
                                            threshold=threshold, summary=summary),
               "roc": plot_roc(series, target / "roc.png") if series else None,
               "calibration": plot_calibration(series, target / "calibration.png") if series else None,
               "training_loss": plot_training_loss(run, target / "training_loss.png")}
    return {key: str(value) if value else None for key, value in outputs.items()}


def _unique_names(paths: list[str | Path]) -> list[str]:
    names, seen = [], {}
    for path in paths:
        stem = Path(str(path).split("#")[0]).stem
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return names
