"""`prmkit demo`: a real PRM trained on this machine in minutes, with a result a newcomer can judge.

Synthetic arithmetic chains with injected errors -> a LoRA PRM on SmolLM2-135M -> the held-out chains scored by
the untrained head and by the trained PRM, side by side, plus an HTML report and the training-loss curve.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from prmkit.config import Config, build_config
from prmkit import display
from prmkit.display import format_value
from prmkit.errors import PRMError
from prmkit.evaluation.metrics import step_metrics
from prmkit.evaluation.processbench import predict_first_error

DEFAULT_BASE = "smollm2-135m"


@dataclass
class DemoOptions:
    out: Path = Path("runs/demo")
    base: str = DEFAULT_BASE
    rows: int = 1600  # one pass: steps x batch_size chains
    val_rows: int = 100
    steps: int = 200
    batch_size: int = 8
    lr: float = 5e-4  # BENCHMARKS.md, "The demo": 5e-5 and 2e-4 stay at the probe's level in this budget
    top_layers: int | None = 8
    num_layers: int | None = 16  # the head reads layer 16 of 30: a strong probe there, and training still adds to it
    head_init: str = "probe"
    head_lr: float | None = None  # None: the same as lr
    probe_rows: int = 800  # chains the probe head is fitted on: on 256 it overfits its 576 weights (0.811 vs 0.835)
    packing: bool = False
    seed: int = 0
    after_error: str = "negative"
    overwrite: bool = False


def demo_config(options: DemoOptions) -> Config:
    """The training config of the demo, built as values (a path is never re-read as YAML text)."""
    return build_config({
        "output_dir": str(options.out), "run_name": "prm",
        "model": {"base": options.base, "num_layers": options.num_layers or None},
        "data": {"train": str(options.out / "data" / "train.jsonl"), "max_length": 320},
        "lora": {"top_layers": options.top_layers or None},
        "loss": {"type": "bce"},
        "training": {"max_steps": options.steps, "batch_size": options.batch_size, "lr": options.lr,
                     "warmup_steps": 5, "logging_steps": 5, "save_steps": max(options.steps // 2, 1),
                     "seed": options.seed, "packing": options.packing, "head_init": options.head_init,
                     "head_lr": options.head_lr, "head_init_rows": options.probe_rows},
    })


def fit_probe_head(model, tokenizer, config: Config) -> dict:
    """Fit the head as training will (`training.head_init: probe`: the same chains, tokenized the same way) and
    write it into `model`, so the demo can show where training starts; `train` then reuses this head."""
    from prmkit.data.io import load_records
    from prmkit.tokenize import tokenize_records
    from prmkit.training.head_init import init_head_from_probe

    records, _ = load_records(config.data.train)
    chains, _ = tokenize_records(tokenizer, records, separator=config.data.separator,
                                 max_length=config.data.max_length)
    return init_head_from_probe(model, chains, tokenizer.pad_token_id, config.loss.type,
                                config.training.head_init_rows)


def position_baseline(records: list[dict]) -> dict:
    """What step position alone predicts: later steps are more often wrong (an error early in a chain makes every
    later step wrong too), so a PRM must beat this, not 0.5, to show it reads the steps."""
    scores, labels = [], []
    for record in records:
        count = len(record["completions"])
        for index, label in enumerate(record["labels"]):
            if label is not None:
                scores.append(1.0 - index / count)
                labels.append(float(label))
    return {"auroc": step_metrics(scores, labels)["auroc"]}


def evaluate_held_out(scorer, records: list[dict], threshold: float = 0.5) -> tuple[dict, list[dict]]:
    """Step AUROC/accuracy and first-error accuracy, plus the scored chains for the report."""
    all_scores = scorer.score_many([(r["prompt"], r["completions"]) for r in records])
    flat_scores, flat_labels, chains, hits = [], [], [], 0
    for record, scores in zip(records, all_scores):
        for score, label in zip(scores, record["labels"]):
            if score is not None and label is not None:
                flat_scores.append(score)
                flat_labels.append(float(label))
        predicted = predict_first_error(scores, threshold)
        hits += predicted == record["first_error"]
        chains.append({"prompt": record["prompt"], "steps": record["completions"], "scores": scores,
                       "labels": record["labels"], "first_error": record["first_error"],
                       "predicted_first_error": predicted})
    metrics = step_metrics(flat_scores, flat_labels, threshold)
    metrics["first_error_accuracy"] = hits / len(records) if records else None
    return metrics, chains


def run_demo(options: DemoOptions, console: Console | None = None) -> dict:
    from transformers import set_seed

    from prmkit.backbones import resolve_base
    from prmkit.data.synthetic import generate_splits
    from prmkit.evaluation.report import plot_training_loss, write_chain_report
    from prmkit.files import write_jsonl
    from prmkit.model import PRMMetadata, load_token_classifier, load_tokenizer
    from prmkit.scoring.scorer import PRMScorer
    from prmkit.training.summary import print_summary
    from prmkit.training.trainer import train

    console = console or display.console()
    out = options.out
    if out.exists() and any(out.iterdir()) and not options.overwrite:
        raise PRMError(f"{out} already holds a demo; pass --overwrite to replace it or --out for another folder")
    started = time.perf_counter()

    console.rule("[bold]1/5  Data")
    train_rows, held_out = generate_splits(options.rows, options.val_rows, options.seed,
                                           after_error=options.after_error)
    write_jsonl(train_rows, out / "data" / "train.jsonl")
    write_jsonl(held_out, out / "data" / "held_out.jsonl")
    console.print(f"{len(train_rows)} training chains and {len(held_out)} held-out chains (another seed) in "
                  f"{out / 'data'}; {sum(r['first_error'] >= 0 for r in held_out)} held-out chains contain an error")

    console.rule("[bold]2/5  Backbone")
    base_path = resolve_base(options.base)
    console.print(f"{options.base} -> {base_path}")

    config = demo_config(options)

    start = START_HEADS[options.head_init]
    console.rule(f"[bold]3/5  Held-out chains scored by the {start} head training starts from")
    set_seed(options.seed)
    tokenizer = load_tokenizer(base_path)
    untrained = load_token_classifier(base_path, num_layers=options.num_layers)
    untrained.config.pad_token_id = tokenizer.pad_token_id
    fitted_head = None
    if options.head_init == "probe":
        with console.status("fitting the head as a linear probe ..."):
            fitted_head = fit_probe_head(untrained, tokenizer, config)
        console.print(f"head fitted as a linear probe on {fitted_head['steps']} labelled steps of "
                      f"{fitted_head['chains']} training chains")
    metadata = PRMMetadata.from_config(config, base_path, finetune="none")
    with console.status("scoring ..."):
        before, _ = evaluate_held_out(PRMScorer(untrained, tokenizer, metadata, device="cpu"), held_out)
    del untrained
    console.print(_metrics_line(before))

    baseline = position_baseline(held_out)
    console.print(f"for comparison, step position alone gives a step AUROC of {format_value(baseline['auroc'])}")

    console.rule(f"[bold]4/5  Training a LoRA PRM for {options.steps} steps")
    summary = train(config, overwrite=True, fitted_head=fitted_head)
    print_summary(summary, console)

    console.rule("[bold]5/5  Held-out chains scored by the trained PRM")
    run_dir = out / "prm"
    with console.status("scoring ..."):
        after, chains = evaluate_held_out(PRMScorer.from_pretrained(run_dir, device="cpu"), held_out)
    console.print(_metrics_line(after))

    results = {"before": before, "after": after, "position_baseline": baseline,
               "start_head": start, "optimizer_steps": summary.optimizer_steps, "train_rows": len(train_rows),
               "held_out_rows": len(held_out), "base": options.base,
               "recipe": {"lr": options.lr, "batch_size": options.batch_size, "top_layers": options.top_layers,
                          "num_layers": options.num_layers, "head_init": options.head_init,
                          "head_lr": options.head_lr, "probe_rows": options.probe_rows, "packing": options.packing,
                          "after_error": options.after_error},
               "seconds": round(time.perf_counter() - started, 1), "run_dir": str(run_dir)}
    report = write_chain_report(out / "report.html", chains,
                                title="prmkit demo: held-out chains scored by the trained PRM",
                                threshold=0.5, summary=_report_summary(before, after, start))
    loss_png = plot_training_loss(run_dir, out / "loss.png")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    console.print(_before_after_table(before, after, baseline, start))
    console.print(f"report: {report}\nloss curve: {loss_png}\nnumbers: {out / 'results.json'}\n"
                  f"model: {run_dir}  (score with PRMScorer.from_pretrained or `prmkit score`)\n"
                  f"total time: {results['seconds']:.0f} s")
    return results


START_HEADS = {"random": "untrained", "probe": "probe-fitted"}
ROWS = (("step AUROC", "auroc"), ("step accuracy @0.5", "accuracy"), ("first-error accuracy", "first_error_accuracy"))


def _before_after_table(before: dict, after: dict, baseline: dict, start: str) -> Table:
    table = Table(title=f"held-out chains: {start} head vs trained PRM", title_justify="left")
    table.add_column("metric")
    table.add_column(start, justify="right")
    table.add_column("trained", justify="right")
    table.add_column("position only", justify="right")
    for name, key in ROWS:
        table.add_row(name, *(format_value(metrics.get(key)) for metrics in (before, after, baseline)))
    return table


def _report_summary(before: dict, after: dict, start: str) -> dict:
    return {f"{name} ({start} -> trained)": f"{format_value(before.get(key))} -> {format_value(after.get(key))}"
            for name, key in ROWS}


def _metrics_line(metrics: dict) -> str:
    return "  ".join(f"{name}: {format_value(metrics.get(key))}" for name, key in ROWS)
