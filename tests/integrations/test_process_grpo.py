"""ProcessGRPOTrainer with a served PRM: a real `prmkit serve` process on loopback, the async RemotePRMReward
client, and the advantages TRL's loss receives equal to the formula on the server's step scores."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

trl = pytest.importorskip("trl", reason="TRL is not installed; the README's test command installs prmkit[rl]")

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))

from serve_helpers import free_port  # noqa: E402
from test_serve_process import wait_healthy  # noqa: E402

from prmkit.data.records import split_steps  # noqa: E402
from prmkit.rl.advantages import char_ends, group_advantages, token_ends  # noqa: E402
from prmkit.serving.clients import RemotePRMReward  # noqa: E402

SEPARATOR = " "


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


def test_a_process_grpo_step_with_a_served_prm_uses_the_servers_step_scores(tiny_llama, server, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.rl import ProcessGRPOConfig, ProcessGRPOTrainer

    seen = []

    class Recording(ProcessGRPOTrainer):
        def _compute_loss(self, model, inputs):
            seen.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_ids", "completion_mask")})
            return super()._compute_loss(model, inputs)

    prm = RemotePRMReward(server, separator=SEPARATOR)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    args = ProcessGRPOConfig(output_dir=str(tmp_path), use_cpu=True, max_steps=1, per_device_train_batch_size=4,
                             num_generations=4, max_completion_length=24, logging_steps=1, report_to=[],
                             save_strategy="no", seed=0, bf16=False, advantage_rule="sum")
    prompt = "Tom has 3 apples and buys 2 more."
    trainer = Recording(model=AutoModelForCausalLM.from_pretrained(tiny_llama), prm=prm, args=args,
                        train_dataset=Dataset.from_dict({"prompt": [prompt] * 2}), processing_class=tokenizer)
    trainer.train()

    adv, ids, mask = seen[0]["advantages"], seen[0]["completion_ids"], seen[0]["completion_mask"]
    rows = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    texts = [tokenizer.decode(r, skip_special_tokens=True) for r in rows]
    scores = asyncio.run(prm.step_scores_many([prompt] * len(texts), texts))

    def decode(token_ids):
        return tokenizer.decode(token_ids, skip_special_tokens=True)

    rewards = [[0.0 if s is None else s for s in (chain or [None])] for chain in scores]
    ends = [token_ends(r, char_ends(t, split_steps(t, SEPARATOR) or [t]), decode) for r, t in zip(rows, texts)]
    expected = group_advantages(rewards, ends, [len(r) for r in rows], [0.0] * len(rows), "sum")
    assert len({s for chain in rewards for s in chain}) > 1
    for i, values in enumerate(expected):
        assert adv[i, :len(values)].tolist() == pytest.approx(values, abs=1e-4)
