"""Shards as users launch them, on the tiny random policy and the tiny PRM run: `prmkit label` as 2 CPU processes
under torchrun, and `prmkit search` with --shard by hand, each merged and compared with one process's file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from prmkit.cli import main
from prmkit.data.synthetic import generate_records
from prmkit.files import write_jsonl

pytestmark = pytest.mark.slow  # subprocesses and real models, as the tests under tests/e2e

LABEL = ["--k", "2", "--max-new-tokens", "8", "--problems-per-batch", "2", "--generation-batch-size", "4",
         "--system-prompt", "", "--temperature", "1.0", "--device", "cpu", "--checker-workers", "1"]


def test_label_under_torchrun_with_two_processes_merges_to_the_one_process_file(tiny_llama, tmp_path):
    data = tmp_path / "problems.jsonl"
    write_jsonl(generate_records(7, seed=3), data)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"):
        env.pop(name, None)
    out = tmp_path / "labels.jsonl"
    launch = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "prmkit",
                             "label", str(data), str(out), "--policy", str(tiny_llama), *LABEL],
                            capture_output=True, text=True, env=env, timeout=600)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert "shard 1/2 (from RANK/WORLD_SIZE (torchrun))" in launch.stdout
    assert "labelling shard 0/2:" in launch.stderr and "labelling shard 1/2:" in launch.stderr  # progress per shard
    assert not out.exists()
    one = tmp_path / "one.jsonl"
    single = subprocess.run([sys.executable, "-m", "prmkit", "label", str(data), str(one), "--policy",
                             str(tiny_llama), *LABEL], capture_output=True, text=True, env=env, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    assert main(["merge", str(out)]) == 0
    assert out.read_bytes() == one.read_bytes()


def test_search_shards_by_hand_merge_to_the_one_process_file(tiny_run, tiny_llama, tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "problems.jsonl"
    rows = generate_records(5, seed=11)
    write_jsonl([{"prompt": r["prompt"], "gold_answer": r["gold_answer"]} for r in rows], data)
    common = [str(tiny_run), str(data), "--policy", str(tiny_llama), "--budgets", "1,2", "--beam-width", "2",
              "--max-rounds", "2", "--max-new-tokens", "8", "--device", "cpu", "--problems-per-batch", "2"]
    out = tmp_path / "search.jsonl"
    for index in (1, 0):
        assert main(["search", common[0], common[1], str(out), *common[2:], "--shard", f"{index}/2"]) == 0
    assert main(["search", common[0], common[1], str(tmp_path / "one.jsonl"), *common[2:]]) == 0
    assert main(["merge", str(out)]) == 0
    assert out.read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert (tmp_path / "search.budgets.json").read_text() == (tmp_path / "one.budgets.json").read_text()
