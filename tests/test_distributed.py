"""DDP on CPU: two gloo processes under torchrun train like one process with the same global batch."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from prmkit.data.io import write_jsonl
from prmkit.data.synthetic import generate_records


def write_config(tmp_path, model_dir):
    write_jsonl(generate_records(64, 5), tmp_path / "train.jsonl")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'runs'}\nmodel: {{base: {model_dir}}}\n"
                   f"data: {{train: {tmp_path / 'train.jsonl'}, max_length: 256}}\nlora: {{dropout: 0.0}}\n"
                   "training: {max_steps: 4, save_steps: 100, logging_steps: 1, lr: 0.005}\n")
    return cfg


def losses(run_dir):
    state = json.loads(next(run_dir.glob("checkpoint-*/trainer_state.json")).read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def test_ddp_two_processes_match_one_process_with_the_same_global_batch(tmp_path, tiny_llama):
    cfg = write_config(tmp_path, tiny_llama)
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "prmkit",
                          "train", str(cfg), "run_name=ddp", "training.batch_size=4"],
                         capture_output=True, text=True, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = subprocess.run([sys.executable, "-m", "prmkit", "train", str(cfg), "run_name=single",
                             "training.batch_size=8"], capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    # same data order and per-step normalisation over the global batch: the same losses and weights
    assert losses(tmp_path / "runs" / "ddp") == pytest.approx(losses(tmp_path / "runs" / "single"), rel=1e-4)
    a = load_file(tmp_path / "runs" / "ddp" / "adapter_model.safetensors")
    b = load_file(tmp_path / "runs" / "single" / "adapter_model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)
    # throughput counts both ranks' tokens, and the summary table is printed once
    ddp_summary = json.loads((tmp_path / "runs" / "ddp" / "summary.json").read_text())
    single_summary = json.loads((tmp_path / "runs" / "single" / "summary.json").read_text())
    assert ddp_summary["trained_tokens"] == single_summary["trained_tokens"]
    assert ddp.stdout.count("tokens/s (real tokens)") == 1
