"""`prmkit label` as a user runs it, on a tiny random policy: the budget it prints, and a run killed with SIGKILL
that, started again, finishes the same file an unbroken run writes (no record twice, none missing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prmkit.data.records import validate_records
from prmkit.data.synthetic import generate_records
from prmkit.files import write_jsonl

PROBLEMS = 12


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("label-data") / "problems.jsonl"
    write_jsonl(generate_records(PROBLEMS, seed=7), path)
    return path


def command(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "prmkit", "label", str(data), str(out), "--policy", str(model), "--k", "2",
            "--max-new-tokens", "12", "--problems-per-batch", "1", "--generation-batch-size", "4",
            "--system-prompt", "", "--temperature", "1.0", *extra]


def run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def unbroken(tiny_llama, problems, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("label-unbroken") / "labels.jsonl"
    return out, run(command(tiny_llama, problems, out)).stdout


def test_an_unbroken_run_prints_its_budget_and_writes_records(unbroken, problems):
    out, stdout = unbroken
    rows = [json.loads(line) for line in problems.read_text(encoding="utf-8").splitlines()]
    steps = sum(len(r["completions"]) for r in rows)
    rollouts = (steps - PROBLEMS) * 2
    assert f"labelling {PROBLEMS} problems, {PROBLEMS} solutions, {steps} steps with mc (k=2)" in stdout
    assert f"at most {rollouts:,} rollouts and {rollouts * 12:,} generated tokens" in stdout
    written = records(out)
    assert [r["row"] for r in written] == list(range(1, PROBLEMS + 1))
    assert sum(r["label"]["rollouts"] for r in written) == rollouts
    assert all(r["label"]["generator"].startswith("transformers:") for r in written)
    validate_records(written, str(out))


def test_a_killed_run_resumes_to_the_unbroken_file(unbroken, tiny_llama, problems, tmp_path):
    whole, _ = unbroken
    out = tmp_path / "labels.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen(command(tiny_llama, problems, out), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and out.read_text(encoding="utf-8").count("\n") >= 3:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run finished before it could be killed; give it more work"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    kept = out.read_text(encoding="utf-8").count("\n")
    assert 3 <= kept < PROBLEMS
    stdout = run(command(tiny_llama, problems, out)).stdout
    assert "continuing:" in stdout and f"({kept} were already there)" in " ".join(stdout.split())
    assert out.read_text(encoding="utf-8") == whole.read_text(encoding="utf-8")


def test_resuming_with_other_options_is_refused(unbroken, tiny_llama, problems, tmp_path):
    whole, _ = unbroken
    out = tmp_path / "labels.jsonl"
    out.write_text(whole.read_text(encoding="utf-8"), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(command(tiny_llama, problems, out, "--seed", "9"), capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 2
    assert "seed: 0 there, 9 now" in done.stderr and "--overwrite" in done.stderr
