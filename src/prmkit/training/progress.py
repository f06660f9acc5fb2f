"""What training shows while it runs, on stderr and from the main process only: on a terminal a progress bar (steps
done of total, the latest logged loss and learning rate, time remaining); piped to a log, one line per logging step
(`step 40/200  loss 0.4123  lr 4.1e-04  grad_norm 1.2  epoch 0.2  1.23 s/step  3m17s left`). Evaluation results
are one line in both. It takes the place of transformers' own display, whose bar redraws with carriage returns
(unreadable in a log) and which prints each log as a Python dict."""

from __future__ import annotations

import atexit
import sys
import time
from contextlib import ExitStack

from transformers import PrinterCallback, ProgressCallback, Trainer, TrainerCallback
from transformers.trainer_utils import has_length

from prmkit.display import format_value, progress_bar

# A training line reads loss and learning rate first, whatever order the engine logged them in.
FIRST = ("loss", "learning_rate")
# Printed as other numbers are, but under a shorter name; the learning rate needs an exponent to be read at all.
SHORT_NAMES = {"learning_rate": "lr"}
FORMATS = {"learning_rate": ".1e"}
# Throughput figures the engine adds to every evaluation and to the end of training: the line states the time taken.
UNSHOWN = {"total_flos", "runtime", "samples_per_second", "steps_per_second"}


def show_training_progress(trainer: Trainer, interactive: bool | None = None) -> None:
    """Replace the engine's display (a tqdm bar, or dicts printed when tqdm is disabled, or a notebook widget) with
    `TrainingProgress`. `interactive`: a bar (True) or lines (False); None decides by whether stderr is a terminal."""
    from transformers.trainer import DEFAULT_PROGRESS_CALLBACK  # the notebook widget inside a notebook

    for callback in list(trainer.callback_handler.callbacks):
        if isinstance(callback, (PrinterCallback, ProgressCallback, DEFAULT_PROGRESS_CALLBACK)):
            trainer.remove_callback(callback)
    trainer.add_callback(TrainingProgress(interactive))


class TrainingProgress(TrainerCallback):
    """The bar or the log lines of one or more `trainer.train()` calls, and of evaluations during and after them;
    every rank but the main one stays silent."""

    def __init__(self, interactive: bool | None = None):
        self.interactive = interactive
        self.bars = ExitStack()  # the training bar, or an evaluation's own bar when no training bar is open
        self.update = None
        self.evaluating = None  # the update of an evaluation's own bar
        self.batches_evaluated = 0
        self.started = 0.0
        self.first_step = 0

    def shows_bars(self) -> bool:
        return sys.stderr.isatty() if self.interactive is None else self.interactive

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.started, self.first_step = time.perf_counter(), state.global_step
        if self.shows_bars():
            self.update = self.open_bar(progress_bar(
                True, "training", total=state.max_steps, unit="steps", completed=state.global_step,
                extra=" loss {task.fields[loss]}  lr {task.fields[lr]} ", loss="-", lr="-"))

    def on_step_end(self, args, state, control, **kwargs):
        if self.update is not None:
            self.update(completed=state.global_step)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        """Evaluation batches: in the training bar's description while it is open (one live display at a time),
        else in a bar of their own that goes away when the evaluation ends. Nothing in a log: the result is."""
        if not state.is_world_process_zero or not self.shows_bars() or not has_length(eval_dataloader):
            return
        self.batches_evaluated += 1
        if self.update is not None:
            self.update(description=f"evaluating {self.batches_evaluated}/{len(eval_dataloader)}")
            return
        if self.evaluating is None:
            self.evaluating = self.open_bar(progress_bar(True, "evaluating", total=len(eval_dataloader),
                                                         unit="batches", transient=True))
        self.evaluating(completed=self.batches_evaluated)

    def on_evaluate(self, args, state, control, **kwargs):
        self.batches_evaluated = 0
        if self.update is not None:
            self.update(description="training")
        elif self.evaluating is not None:
            self.close()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if self.update is not None and "loss" in logs:  # the bar shows it
            self.update(loss=format_value(logs["loss"], ".4g"),
                        lr=format_value(logs.get("learning_rate"), FORMATS["learning_rate"]))
            return
        if self.update is not None and "train_runtime" in logs:  # the full bar says it; the run's summary follows
            return
        # Under a bar, stderr is redirected above it: the stream is looked up now, not when the callback was made.
        print(self.log_line(logs, state.global_step, state.max_steps), file=sys.stderr, flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def open_bar(self, bar):
        # A run that fails leaves no callback to close its bar; it is closed at exit, so the terminal gets its cursor
        # back.
        atexit.register(self.close)
        return self.bars.enter_context(bar)

    def close(self) -> None:
        atexit.unregister(self.close)
        self.update = self.evaluating = None
        self.bars.close()

    def log_line(self, logs: dict, step: int, max_steps: int) -> str:
        """One log of the engine as a line: a training step, an evaluation, or the end of training."""
        if any(key.startswith("eval_") for key in logs):
            runtime = logs.get("eval_runtime")
            metrics = {key.removeprefix("eval_"): value for key, value in logs.items() if key.startswith("eval_")}
            took = f"  ({runtime:.3g} s)" if isinstance(runtime, (int, float)) else ""
            return f"eval at step {step}/{max_steps}  {fields(metrics)}{took}"
        if "train_runtime" in logs:
            metrics = {key: value for key, value in logs.items() if key != "train_runtime"}
            return f"trained to step {step}/{max_steps} in {logs['train_runtime']:.1f} s  {fields(metrics)}"
        line = f"step {step}/{max_steps}  {fields(logs)}"
        done = step - self.first_step
        if done > 0:
            per_step = (time.perf_counter() - self.started) / done
            line += f"  {per_step:.3g} s/step  {duration(per_step * (max_steps - step))} left"
        return line


def fields(logs: dict) -> str:
    """`name value` pairs, two spaces apart, numbers to four significant digits (the learning rate as 4.1e-04)."""
    shown = sorted(((key, value) for key, value in logs.items()
                    if key not in UNSHOWN and not key.endswith(tuple(f"_{name}" for name in UNSHOWN))),
                   key=lambda item: FIRST.index(item[0]) if item[0] in FIRST else len(FIRST))
    return "  ".join(f"{SHORT_NAMES.get(key, key)} {format_value(value, FORMATS.get(key, '.4g'))}"
                     for key, value in shown)


def duration(seconds: float) -> str:
    """A time left as a person reads it: 45s, 3m17s, 2h05m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
