"""The end-of-run summary: one table on the terminal, the same numbers in summary.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from prmkit import display
from prmkit.display import format_value


@dataclass
class RunSummary:
    run_dir: str
    base_model: str
    finetune: str
    loss: str
    optimizer_steps: int  # updates of the weights (not reasoning steps, which are the steps of a chain)
    duration_s: float
    trained_tokens: int
    padding_share: float  # of the tokens in training batches, the share that was padding
    tokens_per_s: float
    trainable_params: int
    total_params: int
    initial_loss: float | None
    final_loss: float | None
    train_rows: int
    rows_dropped: int
    reasoning_steps_dropped: int  # steps of chains cut off by data.max_length (never trained on)
    prompts_truncated: int  # chains whose prompt was left-truncated so that the first step fits
    rows_skipped_invalid: int
    eval_metrics: dict = field(default_factory=dict)
    start_eval_metrics: dict = field(default_factory=dict)  # the head training started from (head_init: probe)
    resumed_from: str | None = None
    resume_changes: dict = field(default_factory=dict)  # key -> [the run started with, the resume set]
    best_checkpoint: str | None = None  # training.best_metric: the checkpoint whose weights are the final model

    @classmethod
    def build(cls, *, config, run_dir: Path, log_history: list[dict], global_step: int, duration_s: float,
              trained_tokens: int, batch_tokens: int, trainable_params: int, total_params: int, train_stats,
              val_stats, reports, eval_metrics: dict, resumed_from: str | None,
              resume_changes: dict | None = None, best_checkpoint: str | None = None) -> "RunSummary":
        losses = [entry["loss"] for entry in log_history if "loss" in entry]
        return cls(
            run_dir=str(run_dir), base_model=config.model.base, finetune=config.model.finetune,
            loss=config.loss.type, optimizer_steps=global_step, duration_s=round(duration_s, 2),
            trained_tokens=trained_tokens,
            padding_share=round(1 - trained_tokens / batch_tokens, 4) if batch_tokens else 0.0,
            tokens_per_s=round(trained_tokens / duration_s, 1) if duration_s else 0.0,
            trainable_params=trainable_params, total_params=total_params,
            initial_loss=losses[0] if losses else None, final_loss=losses[-1] if losses else None,
            train_rows=train_stats.rows - train_stats.rows_dropped,
            rows_dropped=train_stats.rows_dropped + val_stats.rows_dropped,
            reasoning_steps_dropped=train_stats.steps_dropped + val_stats.steps_dropped,
            prompts_truncated=train_stats.prompts_truncated + val_stats.prompts_truncated,
            rows_skipped_invalid=sum(r.rows_skipped for r in reports),
            eval_metrics=_eval_keys(eval_metrics),
            start_eval_metrics=_eval_keys(next((e for e in log_history if e.get("step") == 0 and "eval_loss" in e),
                                               {})),
            resumed_from=resumed_from, resume_changes=dict(resume_changes or {}),
            best_checkpoint=best_checkpoint if config.training.best_metric else None,
        )

    def as_dict(self) -> dict:
        return asdict(self)


def _eval_keys(metrics: dict) -> dict:
    return {k.removeprefix("eval_"): v for k, v in metrics.items()
            if k.removeprefix("eval_") in ("loss", "accuracy", "auroc", "mse", "n_steps", "within_problem_auroc",
                                           "within_problem_auroc_pooled")}


def _with_start(value, start) -> str:
    """An evaluation number, after the one of the starting head when there was one: 'start -> end'."""
    if start is None or isinstance(value, int):
        return format_value(value, '.4f')
    return f"{format_value(start, '.4f')} -> {format_value(value, '.4f')} (probe head -> trained)"


def print_summary(summary: RunSummary, console: Console | None = None) -> None:
    console = console or display.console()
    table = Table(title="prmkit train", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    pct = 100 * summary.trainable_params / max(summary.total_params, 1)
    changed = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in summary.resume_changes.items())
    rows = [
        ("model", f"{summary.base_model} ({summary.finetune}, {summary.loss} loss)"),
        ("trainable parameters", f"{summary.trainable_params:,} of {summary.total_params:,} ({pct:.2f}%)"),
        ("optimizer steps",
         str(summary.optimizer_steps) + (f" (resumed from {summary.resumed_from})" if summary.resumed_from else "")),
        *([("changed on resume", changed)] if changed else []),
        ("loss: first -> last",
         f"{format_value(summary.initial_loss, '.4f')} -> {format_value(summary.final_loss, '.4f')}"),
        ("duration", f"{summary.duration_s:.1f} s"),
        ("tokens/s (real tokens)", f"{summary.tokens_per_s:,.0f}"),
        ("padding in batches", f"{100 * summary.padding_share:.1f}%"),
        ("training rows", str(summary.train_rows)),
        ("dropped by max_length", f"{summary.rows_dropped} rows, {summary.reasoning_steps_dropped} reasoning steps"),
        ("prompts left-truncated", str(summary.prompts_truncated)),
        ("invalid rows skipped", str(summary.rows_skipped_invalid)),
    ]
    rows += [(f"eval {k}", _with_start(v, summary.start_eval_metrics.get(k))) for k, v in summary.eval_metrics.items()]
    if summary.best_checkpoint:
        rows.append(("final model", f"the best checkpoint, {summary.best_checkpoint}"))
    rows.append(("output", summary.run_dir))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
