"""A real TRL GRPOTrainer with prmkit's rewards: two GRPO steps of a tiny policy, rewarded at once by the in-process
`PRMReward` and by `RemotePRMReward` against a real `prmkit serve` process on loopback. Every logged reward must be
what `prmkit score` gives that completion, and the two rewards must agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

trl = pytest.importorskip("trl", reason="TRL is not installed; the README's test command installs prmkit[rl]")

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))

from serve_helpers import free_port  # noqa: E402
from test_serve_process import wait_healthy  # noqa: E402

from prmkit.cli import main  # noqa: E402
from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402
from prmkit.scoring.reward import PRMReward  # noqa: E402
from prmkit.serving.clients import RemotePRMReward  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def server(tiny_run):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "prmkit", "serve", str(tiny_run), "--port", str(port),
                             "--device", "cpu"], env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def prmkit_score(tmp_path: Path, run: Path, prompts: list[str], completions: list[str]) -> list[float | None]:
    rows = [{"prompt": p, "completion": c} for p, c in zip(prompts, completions)]
    write_jsonl(rows, tmp_path / "rollouts.jsonl")
    assert main(["score", str(run), str(tmp_path / "rollouts.jsonl"), str(tmp_path / "scored.jsonl"),
                 "--device", "cpu", "--aggregate", "min"]) == 0
    return [json.loads(line)["score"] for line in (tmp_path / "scored.jsonl").read_text().splitlines()]


def test_grpo_trainer_runs_with_both_prmkit_rewards_and_logs_what_prmkit_score_gives(
        tiny_llama, tiny_run, server, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    local = PRMReward(tiny_run, aggregate="min", device="cpu", name="prm_local")
    remote = RemotePRMReward(server, aggregate="min", name="prm_remote")
    prompts = [r["prompt"] for r in generate_records(8, seed=5)]
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True, max_steps=2, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=24, logging_steps=1, report_to=[],
                      save_strategy="no", temperature=1.0, seed=0, bf16=False)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_llama), reward_funcs=[local, remote],
                          args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                          processing_class=AutoTokenizer.from_pretrained(tiny_llama))
    trainer.train()

    steps = [entry for entry in trainer.state.log_history if "rewards/prm_local/mean" in entry]
    assert len(steps) == 2 and all("rewards/prm_remote/mean" in entry for entry in steps)
    assert all("prm_local/truncated_share" in entry for entry in steps)
    # the last step's completions, as TRL logged them with each reward function's reward
    logged_prompts, completions = list(trainer._logs["prompt"]), list(trainer._logs["completion"])
    by_local, by_remote = list(trainer._logs["rewards"]["prm_local"]), list(trainer._logs["rewards"]["prm_remote"])
    expected = [0.0 if s is None else s for s in prmkit_score(tmp_path, tiny_run, logged_prompts, completions)]
    assert len(completions) == 4 and len(set(expected)) > 1  # real, distinct PRM scores, not all the floor
    assert by_local == pytest.approx(expected, abs=TOL) and by_remote == pytest.approx(expected, abs=TOL)
    assert steps[-1]["rewards/prm_local/mean"] == pytest.approx(sum(expected) / len(expected), abs=TOL)
