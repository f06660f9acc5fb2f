"""The end-of-run summary reports what the data contract promises: rows and reasoning steps dropped by
max_length, prompts left-truncated, invalid rows skipped; optimizer steps are named apart from reasoning steps."""

from __future__ import annotations

from rich.console import Console

from prmkit.config import load_config
from prmkit.data.records import ValidationReport
from prmkit.tokenize import tokenize_records
from prmkit.training.summary import RunSummary, print_summary


def test_truncation_counts_reach_the_summary_and_its_table(tokenizer, tmp_path):
    records = [{"prompt": "What is 1 + 1? " * 40, "completions": ["1 + 1 = 2.", "So 2."], "labels": [1.0, 1.0]},
               {"prompt": "Short?", "completions": ["Yes."] * 60, "labels": [1.0] * 60}]
    _, stats = tokenize_records(tokenizer, records, separator="\n\n", max_length=48)
    assert stats.prompts_truncated == 1 and stats.steps_dropped > 0
    summary = RunSummary.build(
        config=load_config(None, []), run_dir=tmp_path, log_history=[{"loss": 0.7}, {"loss": 0.5}], global_step=3,
        duration_s=2.0, trained_tokens=90, batch_tokens=100, trainable_params=10, total_params=100,
        train_stats=stats, val_stats=type(stats)(), reports=[ValidationReport("f", rows_read=3, rows_kept=2)],
        eval_metrics={}, resumed_from=None)
    saved = summary.as_dict()
    assert saved["optimizer_steps"] == 3 and "steps" not in saved
    assert saved["prompts_truncated"] == 1 and saved["reasoning_steps_dropped"] == stats.steps_dropped
    assert saved["rows_skipped_invalid"] == 1
    console = Console(record=True, width=120)
    print_summary(summary, console)
    table = console.export_text()
    assert "prompts left-truncated │ 1" in table and "optimizer steps        │ 3" in table
    assert f"{stats.steps_dropped} reasoning steps" in table
