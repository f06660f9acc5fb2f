"""Run inside .venv-verl: prmkit.rl.verl_rewards through verl's own code. verl's `load_reward_manager` loads
the class as a user's config names it (reward.reward_manager.source=importlib, module.path=pkg://...), each
rollout of a batch laid out as verl's agent loop lays it out (left-padded prompts, right-padded responses, one
attention mask) is rewarded by `run_single` concurrently and pickled (as Ray moves it), `assemble_rm_scores`
builds `rm_scores` as verl's `RewardLoopManager.compute_rm_score` calls it, and verl's GAE turns them into returns.
Reads the payload as JSON on stdin, prints one JSON object."""

import asyncio
import json
import pickle
import sys

import numpy as np
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.reward import load_reward_manager

payload = json.load(sys.stdin)
tokenizer = AutoTokenizer.from_pretrained(payload["tokenizer"])
config = OmegaConf.create({"reward": {
    "reward_manager": {"source": "importlib", "name": "PRMStepRewardManager",
                       "module": {"path": "pkg://prmkit.rl.verl_rewards"}},
    "custom_reward_function": {"path": None, "name": "compute_score"}, "sandbox_fusion": None,
    "prmkit": {"url": payload["url"], "aggregate": "min", "floor": payload["floor"]}}})
manager = load_reward_manager(config, tokenizer, reward_router_address=None, reward_model_tokenizer=None)

prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in payload["prompts"]]
responses = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
             for r in payload["responses"]]
width_p, width_r = max(map(len, prompts)), max(map(len, responses)) + 3  # padding past the longest, as verl has
pad = tokenizer.pad_token_id
prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
response_mask = torch.tensor([[1] * len(r) + [0] * (width_r - len(r)) for r in responses])
prompt_mask = torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) for p in prompts])
batch = DataProto.from_dict(
    tensors={"prompts": prompt_ids, "responses": response_ids, "input_ids": torch.cat([prompt_ids, response_ids], 1),
             "attention_mask": torch.cat([prompt_mask, response_mask], 1), "response_mask": response_mask},
    non_tensors={"data_source": np.array(["prmkit"] * len(prompts), dtype=object),
                 "extra_info": np.array([{"question": p} for p in payload["prompts"]], dtype=object)})


async def reward_all():  # RewardLoopWorker.compute_score_batch: one task per rollout, data[i : i + 1] each
    return await asyncio.gather(*(manager.run_single(batch[i:i + 1]) for i in range(len(batch))))


outputs = pickle.loads(pickle.dumps(asyncio.run(reward_all())))
scores = [o["reward_score"] for o in outputs]
rm_scores = type(manager).assemble_rm_scores(batch, scores)
_, returns = core_algos.compute_gae_advantage_return(
    token_level_rewards=rm_scores, values=torch.zeros_like(rm_scores), response_mask=response_mask, gamma=1.0,
    lam=1.0)
streamed = torch.tensor(scores, dtype=torch.float32)  # what verl's streaming path builds from the same rewards
print(json.dumps({
    "response_ids": [r for r in responses],
    "rm_scores": [row[:len(r)].tolist() for row, r in zip(rm_scores, responses)],
    "padding_zero": all(float(row[len(r):].abs().sum()) == 0 for row, r in zip(rm_scores, responses)),
    "returns": [row[:len(r)].tolist() for row, r in zip(returns, responses)],
    "streamed": streamed.tolist(),
    "extra_info": [o["reward_extra_info"] for o in outputs]}))
