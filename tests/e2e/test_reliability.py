"""Crash safety and clear failures: nothing a killed or failing run wrote is ever mistaken for a whole checkpoint.

A run killed at any moment (SIGKILL, from outside or in the middle of a checkpoint write) resumes with
training.resume=latest to the same final weights as an uninterrupted run (CPU, fixed seed, no dropout: the
tolerance is rtol=1e-5, atol=1e-6, the one the resume test in test_train_e2e uses). An output folder that cannot
be written, or a disk without room for a checkpoint, stops the run before training with a PRMError.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import Trainer

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.model import METADATA_FILE
from prmkit.training.checkpoints import STAGING_PREFIX, complete_checkpoints
from prmkit.training.trainer import train

MAX_STEPS, SAVE_STEPS = 40, 4
WEIGHTS = "adapter_model.safetensors"


def write_config(folder: Path, model_dir: Path, train_file: Path) -> Path:
    """A YAML config for a 40-step LoRA run on the tiny model; only output_dir differs between the runs."""
    cfg = folder / "cfg.yaml"
    cfg.write_text(
        f"output_dir: {folder / 'runs'}\nrun_name: run\n"
        f"model: {{base: {model_dir}}}\n"
        f"data: {{train: {train_file}, max_length: 128}}\n"
        f"lora: {{r: 4, dropout: 0.0}}\n"
        f"training: {{max_steps: {MAX_STEPS}, save_steps: {SAVE_STEPS}, batch_size: 4, lr: 0.005, "
        "logging_steps: 1, save_total_limit: 3}\n", encoding="utf-8")
    return cfg


@pytest.fixture(scope="module")
def train_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    write_jsonl(generate_records(32, seed=3), path)
    return path


@pytest.fixture(scope="module")
def reference(tiny_llama, train_file, tmp_path_factory) -> dict:
    """Final adapter weights of the uninterrupted run."""
    folder = tmp_path_factory.mktemp("reference")
    train(load_config(write_config(folder, tiny_llama, train_file)))
    return load_file(folder / "runs" / "run" / WEIGHTS)


def assert_same_weights(run: Path, expected: dict) -> None:
    resumed = load_file(run / WEIGHTS)
    assert resumed.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(resumed[key], value, rtol=1e-5, atol=1e-6)


def assert_whole_checkpoints(run: Path) -> None:
    """Every checkpoint-N holds weights, prmkit.json and trainer_state.json; no staging folder is left."""
    for folder in run.glob("checkpoint-*"):
        for name in (WEIGHTS, METADATA_FILE, "trainer_state.json", "optimizer.pt"):
            assert (folder / name).is_file(), folder / name
    assert not list(run.glob(STAGING_PREFIX + "*"))


def start_training(cfg: Path, *python_prelude: str) -> subprocess.Popen:
    """`python -m prmkit train cfg.yaml`, or the same CLI after a few lines of setup when a prelude is given."""
    if not python_prelude:
        command = [sys.executable, "-m", "prmkit", "train", str(cfg)]
    else:
        code = "\n".join([*python_prelude, "from prmkit.cli import main", f"sys.exit(main(['train', {str(cfg)!r}]))"])
        command = [sys.executable, "-c", code]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigkill_mid_run_then_resume_reaches_the_same_weights(tiny_llama, train_file, reference, tmp_path):
    cfg = write_config(tmp_path, tiny_llama, train_file)
    run = tmp_path / "runs" / "run"
    process = start_training(cfg)
    deadline = time.monotonic() + 240
    while not complete_checkpoints(run) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, f"training ended before it was killed: {process.stderr.read()}"
    survivors = complete_checkpoints(run)
    assert survivors and not (run / METADATA_FILE).exists()  # killed mid-run: no final model yet

    # a save the kill interrupted looks like this; the next start removes it
    (run / f"{STAGING_PREFIX}checkpoint-{MAX_STEPS - 1}").mkdir(exist_ok=True)
    summary = train(load_config(cfg, ["training.resume=latest"]))
    assert summary.optimizer_steps == MAX_STEPS and summary.resumed_from == str(survivors[-1])
    assert_same_weights(run, reference)
    assert_whole_checkpoints(run)


def test_kill_inside_a_checkpoint_write_never_publishes_it(tiny_llama, train_file, reference, tmp_path):
    cfg = write_config(tmp_path, tiny_llama, train_file)
    run = tmp_path / "runs" / "run"
    # die (SIGKILL, no cleanup) after the weights and optimizer of checkpoint-8 are written, before its RNG state
    # and trainer_state.json
    process = start_training(cfg, "import os, signal, sys", "from transformers import Trainer",
                             "save_rng = Trainer._save_rng_state",
                             "def dying(self, folder):",
                             "    if self.state.global_step == 8: os.kill(os.getpid(), signal.SIGKILL)",
                             "    save_rng(self, folder)",
                             "Trainer._save_rng_state = dying")
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL, process.stderr.read()
    partial = run / f"{STAGING_PREFIX}checkpoint-8"
    assert (partial / WEIGHTS).is_file() and not (partial / "trainer_state.json").exists()
    assert not (run / "checkpoint-8").exists()
    assert complete_checkpoints(run) == [run / "checkpoint-4"]

    summary = train(load_config(cfg, ["training.resume=latest"]))
    assert summary.resumed_from == str(run / "checkpoint-4")
    assert_same_weights(run, reference)
    assert_whole_checkpoints(run)


def test_a_failed_save_raises_prmerror_and_keeps_earlier_checkpoints(tiny_llama, train_file, tmp_path,
                                                                     monkeypatch):
    save_rng = Trainer._save_rng_state

    def disk_full_at_step_8(self, folder):
        if self.state.global_step == 8:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        save_rng(self, folder)

    monkeypatch.setattr(Trainer, "_save_rng_state", disk_full_at_step_8)
    with pytest.raises(PRMError, match="could not write checkpoint .*checkpoint-8 .*No space left on device.*"
                                       "training.resume=latest"):
        train(load_config(write_config(tmp_path, tiny_llama, train_file)))
    run = tmp_path / "runs" / "run"
    assert complete_checkpoints(run) == [run / "checkpoint-4"]
    assert_whole_checkpoints(run)
