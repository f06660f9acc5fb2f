"""What training shows while it runs: piped to a log, one legible line per logging step and per evaluation (never
the engine's dicts, never a bar redrawn with carriage returns); on a terminal, a bar with the latest loss and
learning rate; on any rank but the main one, nothing."""

from __future__ import annotations

import json
import re
from functools import partial

import pytest
from tiny_models import train_tiny_run
from transformers import TrainerControl, TrainerState, TrainingArguments
from transformers.utils import logging as transformers_logging

import prmkit.training.trainer as trainer_module
from prmkit.cli.common import quiet_transformers
from prmkit.training.progress import TrainingProgress, duration, show_training_progress

STEP_LINE = re.compile(r"step (\d)/2  loss (\S+)  lr (\S+)  grad_norm \S+  epoch \S+  \S+ s/step  \S+ left")


@pytest.fixture
def no_loading_bars():
    """Transformers' weight-loading bar off, as the command line has it, so any tqdm bar left is the Trainer's."""
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    yield
    if bars:
        transformers_logging.enable_progress_bar()


@pytest.fixture
def quiet_engine(no_loading_bars):
    """Transformers as the command line sets it (errors only), which makes the engine print each log as a dict."""
    level = transformers_logging.get_verbosity()
    quiet_transformers()
    yield
    transformers_logging.set_verbosity(level)


def logged(run_dir) -> list[dict]:
    return json.loads((run_dir / "trainer_state.json").read_text())["log_history"]


def test_piped_to_a_log_each_logging_step_and_evaluation_is_one_line_with_the_logged_numbers(
        tiny_llama, tmp_path, capsys, quiet_engine):
    run_dir = train_tiny_run(tiny_llama, tmp_path, "data.val_fraction=0.25", "training.eval_steps=1")
    out, err = capsys.readouterr()
    assert "{'" not in out + err and "\r" not in err

    steps = [match.groups() for match in map(STEP_LINE.fullmatch, err.splitlines()) if match]
    history = logged(run_dir)
    losses = [entry["loss"] for entry in history if "loss" in entry]
    # lr 5e-3 decays linearly to 0 over 2 steps; each step logs the rate it trained with: 5e-3, then 2.5e-3
    assert steps == [("1", f"{losses[0]:.4g}", "5.0e-03"), ("2", f"{losses[1]:.4g}", "2.5e-03")]

    evaluations = [line for line in err.splitlines() if line.startswith("eval at step")]
    eval_losses = [entry["eval_loss"] for entry in history if "eval_loss" in entry]
    # step 1 on the eval_steps grid, then the final model once (the last step's own evaluation is skipped)
    assert [line.split("  ")[:2] for line in evaluations] == [
        ["eval at step 1/2", f"loss {eval_losses[0]:.4g}"], ["eval at step 2/2", f"loss {eval_losses[1]:.4g}"]]
    assert all(" auroc " in line and "samples_per_second" not in line for line in evaluations)
    assert re.search(r"^trained to step 2/2 in \S+ s  train_loss \S+  epoch \S+$", err, re.MULTILINE)


def test_on_a_terminal_a_bar_shows_steps_done_and_the_latest_loss_and_learning_rate(
        tiny_llama, tmp_path, capsys, monkeypatch, no_loading_bars):
    monkeypatch.setattr(trainer_module, "show_training_progress", partial(show_training_progress, interactive=True))
    run_dir = train_tiny_run(tiny_llama, tmp_path, "data.val_fraction=0.25", "training.eval_steps=1")
    err = capsys.readouterr().err
    last_loss = [entry["loss"] for entry in logged(run_dir) if "loss" in entry][-1]
    # off a terminal rich draws the bar once, as it was when it closed
    assert re.search(rf"training +━+ 2/2 steps  loss {last_loss:.4g}  lr 2.5e-03 ", err)
    assert "{'loss'" not in err and "it/s]" not in err  # neither the engine's dicts nor its tqdm bar
    assert not STEP_LINE.search(err) and "trained to step" not in err  # the bar replaces the log lines
    # evaluation results are lines above the bar: one on the eval_steps grid, one for the final model
    assert [line.split("  ")[0] for line in err.splitlines() if line.startswith("eval")] == [
        "eval at step 1/2", "eval at step 2/2"]


def test_while_training_evaluates_the_bar_counts_its_batches(tmp_path, capsys):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    progress, state = TrainingProgress(interactive=True), TrainerState(max_steps=10, global_step=4)
    progress.on_train_begin(args, state, TrainerControl())
    for _ in range(2):
        progress.on_prediction_step(args, state, TrainerControl(), eval_dataloader=[[0], [1], [2]])
    progress.on_train_end(args, state, TrainerControl())
    assert re.match(r"evaluating 2/3 ━+ +4/10 steps  loss -", capsys.readouterr().err)


def test_only_the_main_process_prints(tmp_path, capsys):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    logs = {"loss": 0.5, "grad_norm": 1.25, "learning_rate": 1e-4, "epoch": 0.3}
    for main in (False, True):
        progress, state = TrainingProgress(interactive=False), TrainerState(max_steps=10, global_step=0)
        state.is_world_process_zero = main
        progress.on_train_begin(args, state, TrainerControl())
        state.global_step = 3
        progress.on_log(args, state, TrainerControl(), logs=logs)
        progress.on_log(args, state, TrainerControl(), logs={"eval_loss": 0.25, "eval_runtime": 1.5})
        progress.on_train_end(args, state, TrainerControl())
        lines = capsys.readouterr().err.splitlines()
        if not main:
            assert lines == []
    assert lines[0].startswith("step 3/10  loss 0.5  lr 1.0e-04  grad_norm 1.25  epoch 0.3  ")
    assert lines[1] == "eval at step 3/10  loss 0.25  (1.5 s)"


def test_time_left_reads_as_seconds_minutes_or_hours():
    assert [duration(s) for s in (0, 45, 197, 3600, 7500)] == ["0s", "45s", "3m17s", "1h00m", "2h05m"]
