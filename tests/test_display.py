"""The one progress bar of score, label, search and train: what it prints on stderr, and nothing when it is off; and
every command's table printed whole when the console is not a terminal."""

from __future__ import annotations

import io
from pathlib import Path

from prmkit.config import load_config
from prmkit.data.records import ValidationReport
from prmkit.data.stats import render_stats
from prmkit.display import console, progress_bar
from prmkit.evaluation.evaluate import EvalResult, Threshold
from prmkit.evaluation.tables import render_tables
from prmkit.scoring.aggregate import AGGREGATIONS
from prmkit.search.report import budget_table
from prmkit.tokenize import TokenizationStats
from prmkit.training.summary import RunSummary, print_summary


def test_a_progress_bar_counts_done_of_total_with_its_fields_on_stderr(capsys):
    with progress_bar(True, "labelling", total=10, unit="solutions", extra="{task.fields[rollouts]:,} rollouts",
                      completed=3, rollouts=0) as update:
        update(advance=2, rollouts=1234)
    captured = capsys.readouterr()
    assert "labelling" in captured.err and "5/10 solutions" in captured.err and "1,234 rollouts" in captured.err
    assert captured.out == ""  # stdout stays the command's own output


def test_a_progress_bar_without_a_unit_shows_a_percentage_and_prints_its_description_as_it_is(capsys):
    with progress_bar(True, "scoring {odd}[name].jsonl", total=200, extra="{task.fields[rows]} rows", rows=0) as update:
        update(completed=100, rows=7)
    err = capsys.readouterr().err
    assert "scoring {odd}[name].jsonl" in err and "50%" in err and "7 rows" in err


def test_a_progress_bar_that_is_off_prints_nothing(capsys):
    with progress_bar(False, "searching", unit="problems") as update:
        update(completed=2, total=5)
    assert capsys.readouterr() == ("", "")


# Piped into a log, a console is not a terminal: rich would squeeze every table into 80 columns and cut its cells
# ("prmb…", "(35…"). Each command's table is printed here by the function the command uses, to a console on a
# StringIO (not a terminal), and must come out whole.
LONG_SPLIT = "prmbench_preview_with_a_long_split_name"


def printed(*renderables) -> str:
    buffer = io.StringIO()
    out = console(file=buffer)
    assert not out.is_terminal
    for renderable in renderables:
        out.print(renderable)
    return buffer.getvalue()


def eval_result() -> EvalResult:
    step = {"n_steps": 5678, "auroc": 0.8123, "accuracy": 0.7777, "error_precision": 0.61, "error_recall": 0.52,
            "error_f1": 0.5614, "mse": 0.1832, "ece": 0.0412}
    processbench = {"n_error": 207, "n_correct": 193, "error_accuracy": 0.4, "correct_accuracy": 0.8, "f1": 0.5333,
                    "oracle_f1": 0.61, "oracle_threshold": 0.4321, "scored": {"f1": 0.55, "n_error": 180,
                                                                               "n_correct": 150}}
    best_of_n = {"n_problems": 500, "mean_candidates": 16.0, "random": 0.41, "majority_vote": 0.52,
                 "prm": {how: 0.55 for how in AGGREGATIONS}, "oracle": 0.83}
    split = {"step": step, "processbench": processbench, "best_of_n": best_of_n, "steps": 5678,
             "steps_unscored": 1234, "unscored_share": 1234 / 5678}
    return EvalResult(run="runs/prm", device="cpu", dtype="float32", loss="bce", max_length=512,
                      threshold=Threshold(0.5, "calibrated on runs/prm/calibration_split_with_a_long_name.jsonl"),
                      splits={LONG_SPLIT: split, f"{LONG_SPLIT}_second": split}, processbench_average_f1=0.5333,
                      out=Path("runs/prm/eval"), outputs={}, load_seconds=1.0, total_seconds=2.0)


def test_eval_tables_piped_to_a_log_keep_every_split_name_and_cell():
    text = printed(*render_tables(eval_result()))
    assert "…" not in text
    assert f"│ {LONG_SPLIT} " in text and f"│ {LONG_SPLIT}_second " in text
    assert "22% (1234/5678)" in text  # the unscored column: 1234 of 5678 steps
    assert "0.610 (0.432)" in text and "0.550 (330)" in text  # oracle F1 (threshold), F1 seen (chains)


def test_the_train_summary_search_budgets_and_data_stats_piped_to_a_log_are_not_cut(tmp_path):
    run_dir = tmp_path / ("a_run_folder_whose_path_is_longer_than_a_terminal_" * 2)
    summary = RunSummary.build(
        config=load_config(None, []), run_dir=run_dir, log_history=[{"loss": 0.7}, {"loss": 0.5}], global_step=3,
        duration_s=2.0, trained_tokens=90, batch_tokens=100, trainable_params=10, total_params=100,
        train_stats=TokenizationStats(), val_stats=TokenizationStats(), reports=[ValidationReport("f", 3, 3)],
        eval_metrics={"eval_auroc": 0.8123}, resumed_from=None)
    buffer = io.StringIO()
    print_summary(summary, console(file=buffer))
    assert "…" not in buffer.getvalue() and str(run_dir) in buffer.getvalue()

    budgets = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    cell = {"accuracy": 0.5, "tokens": 12345.0}
    report = {"problems": 500, "graded": 500, "budgets": budgets, "selection": {"weighted_best_of_n": {"agg": "min"}},
              "methods": {"weighted_best_of_n": {str(n): cell for n in budgets}}}
    text = printed(budget_table(report))
    assert "…" not in text and "weighted_best_of_n (agg=min)" in text and text.count("0.500 (12.3k)") == 9

    steps = {"min": 1, "mean": 12.3456, "median": 11, "max": 123456}
    stats = {"rows": 1234567, "steps": 7654321, "steps_per_row": steps, "labels": {"positive": 5, "negative": 5},
             "rows_with_error": 1234567, "error_share": 1.0,
             "tokens": {"min": 12345, "mean": 23456.78, "p50": 22222, "p95": 45678, "max": 123456}}
    text = printed(render_stats(stats))
    assert "…" not in text and "min 1  mean 12.3  median 11  max 123,456" in text
    assert "min 12,345  mean 23,456.8  p50 22,222  p95 45,678  max 123,456" in text


def test_a_rule_in_a_log_is_a_terminal_line_wide_not_the_width_given_to_tables():
    buffer = io.StringIO()
    console(file=buffer).rule("1/5  Data")
    (line,) = buffer.getvalue().splitlines()
    assert len(line) == 80 and "1/5  Data" in line
