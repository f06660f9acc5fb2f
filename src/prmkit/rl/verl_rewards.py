"""A verl reward manager that rewards every step of a rollout: the PRM's score of each step, from a `prmkit serve`
server, placed at the response token where that step ends, so verl's token-level rewards (and PPO's GAE or
REINFORCE++ returns over them) credit each step instead of the last token alone.

    prmkit serve runs/prm --port 8000
    python -m verl.trainer.main_ppo ... \\
        reward.reward_manager.source=importlib \\
        reward.reward_manager.module.path=pkg://prmkit.rl.verl_rewards \\
        reward.reward_manager.name=PRMStepRewardManager \\
        +reward.prmkit.url=http://127.0.0.1:8000

The class follows verl 0.9's reward-loop contract (`verl/experimental/reward_loop/reward_manager/base.py`):
`run_single(data)` rewards one rollout and `assemble_rm_scores(data, scores)` builds the batch's `rm_scores`,
which verl's trainer copies into `token_level_scores`. The prompt the PRM reads is `extra_info[prompt_key]`
("question" by default, where verl's preprocessing scripts put the problem), as in verl_compute_score.py.

What verl 0.9.1 does with it, read from its source: when rewards are computed after rollout
(`RewardLoopManager.compute_rm_score` in `verl/experimental/reward_loop/reward_loop.py`), it calls this class's
`assemble_rm_scores`, and each step's reward lands on its end token. When rewards stream during rollout (its
default without a verl-hosted reward model: `AgentLoopWorker` in `verl/experimental/agent_loop/agent_loop.py`),
verl writes one number per rollout at the last token itself; that number is then the PRM's chain reward (the
`aggregate` of the step scores, as `PRMReward` gives), so the same manager still trains, only without per-step
credit. `reward_extra_info` carries `prm_steps` (steps scored) and `prm_truncated` for verl's logs either way.

Settings under `reward.prmkit` (all optional): `url` (default: $PRMKIT_URL or http://127.0.0.1:8000),
`prompt_key`, `aggregate` (min), `floor` (0.0, the reward of a response with no step), `separator` (default: the
one the server reports at /health), `ready_timeout_s` (300: how long the manager waits for the server's /health to
answer ready, as a server loading its model answers 503 "starting"; then a PRMError says what it last answered).
Needs verl and prmkit in one environment (prmkit takes the transformers verl pins; scripts/setup_verl.sh builds
one); the module is loaded by name, not by file, so the rewards it returns pickle by reference when Ray moves them
between workers.
"""

from __future__ import annotations

import os
import time

import httpx
import torch
from omegaconf import OmegaConf
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from prmkit.errors import PRMError
from prmkit.rl.advantages import completion_steps, token_rewards
from prmkit.scoring.aggregate import chain_reward
from prmkit.scoring.inputs import split_steps
from prmkit.serving.clients import RemotePRMReward


READY_TIMEOUT_S = 300.0  # loading a PRM of a few billion parameters takes minutes
POLL_S = 1.0


def wait_ready(url: str, timeout_s: float = READY_TIMEOUT_S, poll_s: float | None = None) -> dict:
    """The server's /health answer once it is ready (200); until then, not listening yet or answering 503 (starting,
    or unhealthy) is waited out, asking every `poll_s` (default POLL_S) up to `timeout_s`, after which a PRMError
    says what the server last answered."""
    poll_s = POLL_S if poll_s is None else poll_s
    health = f"{url.rstrip('/')}/health"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            response = httpx.get(health, timeout=min(30.0, max(1.0, deadline - time.monotonic())))
            if response.status_code == 200:
                try:
                    return response.json()
                except ValueError:
                    raise PRMError(f"{health} answered 200 but not JSON ({response.text[:200]!r}); is it a "
                                   "`prmkit serve` server?") from None
            last = f"it answered {response.status_code} {response.text[:200]}"
        except httpx.TransportError as err:
            last = f"it could not be reached ({type(err).__name__}: {err})"
        if time.monotonic() + poll_s > deadline:
            raise PRMError(f"{health} did not answer ready within {timeout_s:g} s: {last}. Is `prmkit serve` "
                           "running there? A PRM that loads slowly needs a longer reward.prmkit.ready_timeout_s")
        time.sleep(poll_s)


class StepRewards(float):
    """A rollout's reward as verl passes it around: a float (the chain reward, which is what verl's streaming
    path writes at the last token) that also carries each step's (end token, reward) for `assemble_rm_scores`."""

    def __new__(cls, chain: float, steps: list[tuple[int, float]]):
        self = super().__new__(cls, chain)
        self.steps = list(steps)
        return self

    def __reduce__(self):  # verl moves rewards between Ray workers by pickling them
        return StepRewards, (float(self), self.steps)


class PRMStepRewardManager(RewardManagerBase):
    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None,
                 reward_model_tokenizer=None, **kwargs):
        super().__init__(config, tokenizer, compute_score)
        settings = OmegaConf.to_container(OmegaConf.select(config, "reward.prmkit", default=None) or {}) or {}
        self.url = settings.get("url") or os.environ.get("PRMKIT_URL", "http://127.0.0.1:8000")
        self.prompt_key = settings.get("prompt_key", "question")
        self.floor = float(settings.get("floor", 0.0))
        # verl starts its reward workers alongside the server, which may still be loading the PRM: wait for it
        # here, once, rather than fail the first batch after a whole rollout
        health = wait_ready(self.url, float(settings.get("ready_timeout_s", READY_TIMEOUT_S)))
        separator = settings.get("separator") or health.get("separator")
        if not separator:
            raise PRMError(f"{self.url}/health names no separator ({health}); is it a `prmkit serve` server? Set "
                           "reward.prmkit.separator to the run's step separator")
        self.prm = RemotePRMReward(self.url, aggregate=settings.get("aggregate", "min"), floor=self.floor,
                                   separator=separator)

    async def run_single(self, data) -> dict:
        item = data[-1]  # for multi-sequence outputs verl rewards the last sequence, as its naive manager does
        response = item.batch["responses"]
        length = int(item.batch["attention_mask"][-response.shape[-1]:].sum())
        ids = response[:length].tolist()
        extra_info = item.non_tensor_batch.get("extra_info", {}) or {}
        prompt = extra_info.get(self.prompt_key)
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"extra_info[{self.prompt_key!r}] holds no prompt (extra_info keys: "
                             f"{sorted(extra_info)}); store the problem text there in the dataset, or set "
                             "reward.prmkit.prompt_key")

        def decode(part):
            return self.tokenizer.decode(part, skip_special_tokens=True)  # as verl decodes responses

        text = decode(ids)
        scores = (await self.prm.step_scores_many([prompt], [text]))[0]
        # the rules ProcessGRPOTrainer uses: an unread step gets the floor, no step is one floor step at the end
        rewards, ends = completion_steps(ids, text, split_steps(text, self.prm.separator), scores, self.floor,
                                         decode)
        chain = self.floor if not scores else chain_reward(scores, self.prm.aggregate, self.floor,
                                                            self.prm.truncated)
        return {"reward_score": StepRewards(chain, list(zip(ends, rewards)) if ids else []),
                "reward_extra_info": {"prm_steps": len(scores or []), "prm_truncated": None in (scores or [])}}

    @classmethod
    def assemble_rm_scores(cls, data, scores: list) -> torch.Tensor:
        """`rm_scores` of shape (batch, response length): each step's reward at its end token; a reward without
        steps (another manager's float) at the last response token, as verl's own default does."""
        prompt_length = data.batch["prompts"].size(1)
        valid = data.batch["attention_mask"][:, prompt_length:].sum(dim=1).tolist()
        rm_scores = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        for i, score in enumerate(scores):
            if not valid[i]:
                continue
            steps = getattr(score, "steps", None)
            if steps is None:
                rm_scores[i, valid[i] - 1] = float(score)
                continue
            ends, rewards = [e for e, _ in steps], [r for _, r in steps]
            rm_scores[i, :valid[i]] = torch.tensor(token_rewards(rewards, ends, valid[i]))
        return rm_scores
