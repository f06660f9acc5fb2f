"""`prmkit eval`: score labelled data with a trained PRM and report step metrics, the ProcessBench first-error
protocol, PRMBench's PRMScore and best-of-N accuracy, as a table, metrics.json, an HTML page of chains and PNG
plots.

What each row contributes:
  labels                       step metrics (AUROC, accuracy/precision/recall/F1 at the threshold, MSE, ECE);
  first_error (or labels)      ProcessBench: predicted first error = first step scoring below the threshold;
  correct/final_answer_correct best-of-N, for rows that share a prompt (or a candidates row with a `correct`
                               list, or a `prmkit search` row, whose samples carry their own: see
                               evaluation.splits); majority vote where every candidate has an `answer`; in a file
                               without them, a sample is right when every labelled step is; and for the same groups the
                               within-problem metrics (`within_problem`: AUROC, and the choosers at each N with
                               bootstrap and paired intervals);
  prmbench_class (and labels)  PRMBench: PRMScore overall, per error class and per dimension.
Raw ProcessBench files (`problem`, `steps`, `label`) and raw PRMBench files (`modified_process`, `error_steps`,
`classification`) are converted on the fly, as `prmkit data convert` would.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from prmkit.display import format_value
from prmkit.errors import PRMError
from prmkit.evaluation.metrics import best_of_n_metrics, step_metrics
from prmkit.evaluation.options import EvalOptions
from prmkit.evaluation.prmbench import DEFAULT_THRESHOLD as PRMBENCH_THRESHOLD
from prmkit.evaluation.prmbench import prmbench_metrics
from prmkit.evaluation.processbench import (
    average_f1,
    calibrate_threshold,
    evaluate_threshold,
    first_error_scored,
    predict_first_error,
    processbench_f1,
)
from prmkit.evaluation.splits import Chain, Split, chain_lengths, evenly_spaced, load_split  # noqa: F401
from prmkit.evaluation.within_problem import step_label_ceiling, within_problem_metrics
from prmkit.files import write_json_atomic
from prmkit.scoring.aggregate import AGGREGATIONS, aggregate, is_truncated
from prmkit.scoring.options import ScoringOptions
from prmkit.scoring.scorer import PRMScorer

DEFAULT_THRESHOLD = 0.5  # a probability midpoint for bce; for mse, the midpoint of the 0/1 step labels
# A split with at least this share of its steps past max_length gets a warning with the --max-length that fits.
UNSCORED_WARNING = 0.1


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
    warnings: list[str] = field(default_factory=list)  # what makes the numbers less than they seem

    def to_dict(self) -> dict:
        threshold = {k: v for k, v in asdict(self.threshold).items() if v is not None}
        return {"run": self.run, "device": self.device, "dtype": self.dtype, "loss": self.loss,
                "max_length": self.max_length, "threshold": threshold, "splits": self.splits,
                "processbench_average_f1": self.processbench_average_f1, "warnings": self.warnings,
                "seconds": {"load": self.load_seconds, "total": self.total_seconds}, "out": str(self.out),
                "outputs": self.outputs}


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


CORRECT_FROM_FIELD = "the rows' correct / final_answer_correct"
CORRECT_FROM_LABELS = "step labels: a sample is right when every labelled step is right"


def sample_correctness(split: Split) -> tuple[list[bool | None], str | None]:
    """Each chain's correctness and where it came from: the rows' own field when any row has one (rows without it
    then take no part), else the step labels; None for a chain with neither."""
    if any(c.correct is not None for c in split.chains):
        return [c.correct for c in split.chains], CORRECT_FROM_FIELD
    derived = [_all_steps_right(c.labels) for c in split.chains]
    return derived, CORRECT_FROM_LABELS if any(d is not None for d in derived) else None


def _all_steps_right(labels: list[float | None] | None) -> bool | None:
    known = [label for label in labels or [] if label is not None]
    return all(label >= 0.5 for label in known) if known else None


def best_of_n_groups(split: Split) -> list[dict]:
    """Problems with at least two candidates whose correctness is known (`sample_correctness`), in file order.
    A sample without an answer (one cut off before it wrote one) votes for nothing, as in `prmkit search`; only a
    split where no sample has an answer has no vote (`answers` None). A group whose every sample carries the
    policy's mean log-prob has it as `confidence`, the baseline chooser beside the PRM."""
    voted = any(chain.answer is not None for chain in split.chains)
    grouped: dict[str, list[tuple[Chain, bool]]] = {}
    for chain, correct in zip(split.chains, sample_correctness(split)[0]):
        if correct is not None:
            grouped.setdefault(chain.group, []).append((chain, correct))
    groups = []
    for key, members in grouped.items():
        if len(members) >= 2:
            chains = [chain for chain, _ in members]
            answers = [c.answer for c in chains]
            texts = [None if a is None else _answer_text(a) for a in answers] if voted else None
            group = {"key": key, "correct": [correct for _, correct in members], "answers": texts,
                     "truncated": [is_truncated(c.scores) for c in chains],
                     "scores": {how: [aggregate(c.scores, how) for c in chains] for how in AGGREGATIONS}}
            if all(c.mean_logprob is not None for c in chains):
                group["confidence"] = [c.mean_logprob for c in chains]
            steps_right = [_all_steps_right(c.labels) for c in chains]
            if None not in steps_right:
                group["steps_right"] = steps_right
            groups.append(group)
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
    steps = sum(len(c.scores) for c in split.chains)
    unscored = sum(s is None for c in split.chains for s in c.scores)
    result: dict = {"rows": len(split.chains), "label_scheme": split.label_scheme,
                    "score_seconds": round(split.seconds, 2),
                    "chains_per_s": round(len(split.chains) / split.seconds, 2) if split.seconds else None,
                    "steps": steps, "steps_unscored": unscored,
                    "unscored_share": round(unscored / steps, 4) if steps else None,
                    "step": step_metrics(scores, labels, threshold) if scores else None}
    if split.conversion is not None:
        result["conversion"] = split.conversion
    if chains:
        step_scores, gold = [c.scores for c in chains], [c.first_error for c in chains]
        result["processbench"] = evaluate_threshold(step_scores, gold, threshold)
        oracle = calibrate_threshold(step_scores, gold)
        result["processbench"]["oracle_threshold"] = oracle["threshold"]
        result["processbench"]["oracle_f1"] = oracle["f1"]
        result["processbench"]["scored"] = processbench_scored(chains, threshold)
    bench = [c for c in split.chains if c.prmbench_class is not None]
    if bench:
        result["prmbench"] = prmbench_metrics(
            [c.prmbench_class for c in bench], [c.scores for c in bench],
            [c.labels if c.labels is not None else [None] * len(c.scores) for c in bench],
            PRMBENCH_THRESHOLD)  # the protocol's fixed 0.5, so scores compare with PRMBench's leaderboard
    groups = best_of_n_groups(split)
    result["best_of_n"] = best_of_n_metrics(groups, list(AGGREGATIONS)) if groups else None
    source = sample_correctness(split)[1]
    result["within_problem"] = (
        within_problem_metrics(groups, list(AGGREGATIONS), correct_from=source) if groups
        else {"skipped": "no row says whether its sample is right (a correct / final_answer_correct field or step "
                         "labels)" if source is None else
              "no prompt has two or more samples whose correctness is known; within-problem metrics compare "
              "samples of one problem"})
    # correctness from the step labels would make the labels' own score perfect by construction
    ceiling = step_label_ceiling(groups) if source == CORRECT_FROM_FIELD else None
    if ceiling is not None:
        result["within_problem"]["step_label_ceiling"] = ceiling
    return result


def processbench_scored(chains: list[Chain], threshold: float) -> dict:
    """ProcessBench over the chains the PRM saw up to their labelled first error (a correct chain: all of its
    steps). A chain whose first error lay past max_length can never be found, so the F1 over every chain
    mixes the PRM's misses with what it was never shown."""
    seen = [c for c in chains if first_error_scored(c.scores, c.first_error)]
    predicted = [predict_first_error(c.scores, threshold) for c in seen]
    return {**processbench_f1(predicted, [c.first_error for c in seen]), "chains_left_out": len(chains) - len(seen)}


def unscored_warning(split: Split, metrics: dict, scorer: PRMScorer) -> str | None:
    """A warning naming the --max-length that scores every step, when a large share of the split went unscored."""
    share = metrics["unscored_share"]
    if not share or share < UNSCORED_WARNING:
        return None
    cut = [c for c in split.chains if any(s is None for s in c.scores)]
    longest = max(chain_lengths(scorer, cut))
    fits = -(-longest // 64) * 64  # rounded up to a multiple of 64
    pb = metrics.get("processbench")
    left_out = pb["scored"]["chains_left_out"] if pb else 0
    missed = (f"; ProcessBench F1 includes {left_out} chain{'s' * (left_out != 1)} that the PRM did not see up to "
              "the labelled first error (a correct chain: to its end), which the 'F1 seen' column leaves out"
              if left_out else "")
    return (f"{split.name}: {metrics['steps_unscored']} of {metrics['steps']} steps ({share:.0%}) lie past "
            f"max_length {scorer.metadata.max_length} and were not scored, so no metric reads them{missed}. Pass "
            f"--max-length {fits} to score every step (the longest chain is {longest} tokens; longer is slower)")


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
        if split.conversion and split.conversion["rows_skipped"]:
            c = split.conversion
            reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(c["skipped"].items()))
            progress(f"{split.name}: {c['rows_skipped']} of {c['rows_read']} raw {c['source_format']} rows were "
                     f"skipped by the conversion ({reasons})")
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
    # a hub model id is no folder of the user's: its results go under ./eval/<owner--name>/
    home = Path(run) if Path(run).exists() else Path("eval") / str(run).replace("/", "--")
    target = Path(options.out) if options.out else home / "eval" / "+".join(s.name for s in splits)
    result = EvalResult(run=str(run), device=str(scorer.device), dtype=str(scorer.dtype).replace("torch.", ""),
                        loss=scorer.metadata.loss, max_length=scorer.metadata.max_length, threshold=chosen,
                        splits=per_split, processbench_average_f1=average_f1(pb) if pb else None, out=target,
                        outputs={}, load_seconds=round(load_s, 2), total_seconds=0.0,
                        warnings=[w for s in splits if (w := unscored_warning(s, per_split[s.name], scorer))])
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
        summary.update(within_problem_summary(name, m["within_problem"]))
    outputs = {"report": write_chain_report(target / "report.html", chains, title=f"prmkit eval: {run}",
                                            threshold=threshold, summary=summary),
               "roc": plot_roc(series, target / "roc.png") if series else None,
               "calibration": plot_calibration(series, target / "calibration.png") if series else None,
               "training_loss": plot_training_loss(run, target / "training_loss.png")}
    return {key: str(value) if value else None for key, value in outputs.items()}


def within_problem_summary(name: str, within: dict) -> dict[str, str]:
    """The report's lines for a split's within-problem metrics: the AUROC of the by-N chain score, and each PRM
    chooser against majority vote at the largest N."""
    if "by_n" not in within:
        return {f"{name}: within-problem metrics": f"none: {within['skipped']}"}
    result = within["by_n"]
    how, n = result["aggregation"], str(result["n"][-1])
    auroc = within["auroc"][how]
    lines = {f"{name}: within-problem AUROC ({how})":
             f"{format_value(auroc['auroc'])} per problem, {format_value(auroc['auroc_pooled'])} pooled "
             f"({auroc['problems']} problems with both outcomes, {auroc['one_sided']} one-sided)"}
    confidence = within.get("confidence_auroc")
    if confidence is not None:
        lines[f"{name}: within-problem AUROC (policy confidence)"] = (
            f"{format_value(confidence['auroc'])} per problem, {format_value(confidence['auroc_pooled'])} pooled "
            f"({confidence['problems']} problems with both outcomes, {confidence['one_sided']} one-sided)")
    elif within.get("confidence_note"):
        lines[f"{name}: policy confidence"] = f"none: {within['confidence_note']}"
    ceiling = within.get("step_label_ceiling")
    if ceiling is not None:
        lines[f"{name}: within-problem AUROC (the step labels themselves, the ceiling)"] = (
            f"{format_value(ceiling['auroc'])} per problem, {format_value(ceiling['auroc_pooled'])} pooled "
            f"({ceiling['right_with_a_wrong_step']} of {ceiling['right_samples']} right samples have a wrong step)")
    for method, cells in result["methods"].items():
        cell = cells[n]
        lines[f"{name}: {method} at N={n}"] = f"{cell['accuracy']:.3f} [{cell['low']:.2f}, {cell['high']:.2f}]"
    for method, cells in result["versus_majority"].items():
        cell = cells[n]
        lines[f"{name}: {method} at N={n}"] = (f"{cell['difference']:+.3f} [{cell['low']:.2f}, {cell['high']:.2f}] "
                                               "paired")
    return lines


def _unique_names(paths: list[str | Path]) -> list[str]:
    names, seen = [], {}
    for path in paths:
        stem = Path(str(path).split("#")[0]).stem
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return names
