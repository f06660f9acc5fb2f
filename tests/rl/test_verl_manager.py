"""prmkit.rl.verl_rewards' own logic, in CI without verl: `verl` is a stub package in sys.modules holding only the
base class the manager extends (verl 0.9.1's RewardManagerBase keeps the config and the tokenizer), batches are laid
out as verl's agent loop lays them out (left-padded prompts, right-padded responses, one attention mask), and the
server is a stub `prmkit serve` on loopback with chosen step scores. Checked: each step's reward on the response
token where the step ends (found here by a plain scan of decoded prefixes), the floor rules, what
`assemble_rm_scores` builds, and the wait for a server that answers 503 while it starts. The test through verl's
own loader, DataProto and GAE, against a real server, is tests/integrations/test_verl_step_rewards.py
(.venv-verl)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import math
import pickle
import sys
import types
from pathlib import Path

import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))

from serve_helpers import LiveServer, free_port  # noqa: E402

from prmkit.errors import PRMError  # noqa: E402

SEPARATOR = " "
FLOOR = -1.0  # not 0, so a floored step shows on its end token
VERL_MODULES = ["verl", "verl.experimental", "verl.experimental.reward_loop",
                "verl.experimental.reward_loop.reward_manager", "verl.experimental.reward_loop.reward_manager.base"]


def step_score(j: int, step: str) -> float | None:
    """The stub server's score of step j: its length / 10, except the third (unread: cut by max_length, null)
    and the fourth (a numeric failure: NaN)."""
    return None if j == 2 else math.nan if j == 3 else len(step) / 10


def stub_server(starting: int = 0) -> tuple[FastAPI, list[int]]:
    """`prmkit serve`'s two endpoints the manager uses: /health answers 503 "starting" `starting` times (a server
    loading its model), then 200 with the separator; /v1/score scores the steps it is sent by `step_score`."""
    app = FastAPI()
    health_calls: list[int] = []

    @app.get("/health")
    async def health():
        health_calls.append(1)
        if len(health_calls) <= starting:
            return JSONResponse({"status": "starting"}, status_code=503)
        return JSONResponse({"status": "ok", "separator": SEPARATOR})

    @app.post("/v1/score")
    async def score(request: Request):
        body = await request.json()
        scores = [step_score(j, step) for j, step in enumerate(body["steps"])]
        return Response(json.dumps({"step_scores": scores}), media_type="application/json")  # NaN as JSON's NaN

    return app, health_calls


@pytest.fixture
def verl_rewards(monkeypatch):
    """The module, imported against a stub `verl` (and a stub omegaconf where verl's own is not installed)."""
    class RewardManagerBase:
        def __init__(self, config, tokenizer, compute_score=None):
            self.config, self.tokenizer, self.compute_score = config, tokenizer, compute_score

    for name in VERL_MODULES:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[VERL_MODULES[-1]].RewardManagerBase = RewardManagerBase
    if importlib.util.find_spec("omegaconf") is None:
        omegaconf = types.ModuleType("omegaconf")

        class OmegaConf:  # the two calls the manager makes, on a plain dict
            @staticmethod
            def select(config, key, default=None):
                for part in key.split("."):
                    if not isinstance(config, dict) or part not in config:
                        return default
                    config = config[part]
                return config

            @staticmethod
            def to_container(config):
                return config

        omegaconf.OmegaConf = OmegaConf
        monkeypatch.setitem(sys.modules, "omegaconf", omegaconf)
    monkeypatch.delitem(sys.modules, "prmkit.rl.verl_rewards", raising=False)
    module = importlib.import_module("prmkit.rl.verl_rewards")
    monkeypatch.setattr(module, "POLL_S", 0.05, raising=False)
    yield module
    sys.modules.pop("prmkit.rl.verl_rewards", None)  # the next import gets the real verl, where there is one
    vars(sys.modules["prmkit.rl"]).pop("verl_rewards", None)


def config(**settings):
    raw = {"reward": {"prmkit": settings}}
    if "omegaconf" in sys.modules and hasattr(sys.modules["omegaconf"], "DictConfig"):
        return sys.modules["omegaconf"].OmegaConf.create(raw)
    return raw


class Rows:
    """verl's DataProto as the manager reads it: `batch` tensors with a batch dimension, `non_tensor_batch`
    arrays; a slice is a DataProto, an index one row (a DataProtoItem, tensors without the batch dimension)."""

    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch

    def __len__(self) -> int:
        return len(self.batch["responses"])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Rows({k: v[index] for k, v in self.batch.items()},
                        {k: v[index] for k, v in self.non_tensor_batch.items()})
        return types.SimpleNamespace(batch={k: v[index] for k, v in self.batch.items()},
                                     non_tensor_batch={k: v[index] for k, v in self.non_tensor_batch.items()})


def verl_batch(tokenizer, prompts: list[str], responses: list[str]) -> tuple[Rows, list[list[int]]]:
    """Left-padded prompts, right-padded responses ending in EOS (padding past the longest, as verl has), one
    attention mask over both, the problem text in extra_info["question"]."""
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    response_ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in responses]
    width_p, width_r = max(map(len, prompt_ids)), max(map(len, response_ids)) + 3
    pad = tokenizer.pad_token_id
    prompt_t = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompt_ids])
    response_t = torch.tensor([r + [pad] * (width_r - len(r)) for r in response_ids])
    mask = torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
                         for p, r in zip(prompt_ids, response_ids)])
    rows = Rows({"prompts": prompt_t, "responses": response_t, "attention_mask": mask},
                {"extra_info": [{"question": p} for p in prompts]})
    return rows, response_ids


def scanned_ends(ids: list[int], text: str, decode) -> list[int]:
    """Each step's end token by a plain scan: the first token whose decoded prefix holds the text up to the step's
    last character; the last step takes the last token."""
    ends, cursor = [], 0
    for step in text.split(SEPARATOR):
        if not step.strip():
            continue
        cursor = text.index(step.strip(), cursor) + len(step.strip())
        k = next(k for k in range(len(ids)) if decode(ids[:k + 1]).startswith(text[:cursor]))
        ends.append(max(k, ends[-1] if ends else 0))
    return ends[:-1] + [len(ids) - 1] if ends else []


def test_step_rewards_land_on_step_end_tokens_and_assemble_into_rm_scores(verl_rewards, tokenizer):
    # the last one's characters are split across byte-level tokens
    responses = ["3 + 12 = 15 apples", "The answer is 42.", "   ", "7-2=5 so", "水 😀 é"]
    prompts = ["Tom has 3 apples and buys 12 more.", "What is it?", "Say nothing.", "What is 7 - 2?", "Say it."]
    rows, response_ids = verl_batch(tokenizer, prompts, responses)
    with LiveServer(stub_server()[0]) as url:
        manager = verl_rewards.PRMStepRewardManager(config(url=url, floor=FLOOR), tokenizer)
        assert manager.prm.separator == SEPARATOR  # from the server's /health

        async def reward_all():  # verl's reward loop: one task per rollout, data[i : i + 1] each
            return await asyncio.gather(*(manager.run_single(rows[i:i + 1]) for i in range(len(rows))))

        outputs = pickle.loads(pickle.dumps(asyncio.run(reward_all())))  # as Ray moves them between workers
    scores = [o["reward_score"] for o in outputs]
    rm_scores = type(manager).assemble_rm_scores(rows, scores)
    assert rm_scores.shape == rows.batch["responses"].shape

    def decode(part):
        return tokenizer.decode(part, skip_special_tokens=True)

    for i, (ids, text) in enumerate(zip(response_ids, responses)):
        steps = text.split()
        want = [0.0] * len(ids)
        if not steps:  # no step: one floor step on the last token
            want[-1] = FLOOR
        for j, end in enumerate(scanned_ends(ids, text, decode)):
            score = step_score(j, steps[j])
            want[end] += FLOOR if score is None or math.isnan(score) else score
        assert rm_scores[i, :len(ids)].tolist() == pytest.approx(want, abs=1e-6), text
        assert not rm_scores[i, len(ids):].any()  # padding carries nothing
        read = [step_score(j, s) for j, s in enumerate(steps)]
        # the streamed number is the chain reward: min over the read steps, the floor where one is NaN or none is
        usable = [s for s in read if s is not None]
        chain = FLOOR if not usable or any(math.isnan(s) for s in usable) else min(usable)
        assert float(scores[i]) == pytest.approx(chain)
        assert outputs[i]["reward_extra_info"] == {"prm_steps": len(steps), "prm_truncated": len(steps) > 2}
    assert float(scores[3]) == pytest.approx(0.2)  # "7-2=5 so": two steps, both read, min(0.5, 0.2)


def test_a_reward_without_steps_goes_on_the_last_response_token(verl_rewards, tokenizer):
    rows, response_ids = verl_batch(tokenizer, ["What is it?"] * 2, ["The answer is 42.", "42"])
    rm_scores = verl_rewards.PRMStepRewardManager.assemble_rm_scores(rows, [0.25, 0.75])  # another manager's floats
    for i, ids in enumerate(response_ids):
        assert rm_scores[i].tolist() == [0.0] * (len(ids) - 1) + [[0.25, 0.75][i]] + [0.0] * (
            rm_scores.shape[1] - len(ids))


def test_a_rollout_without_its_prompt_in_extra_info_is_named(verl_rewards, tokenizer):
    rows, _ = verl_batch(tokenizer, ["What is it?"], ["42"])
    rows.non_tensor_batch["extra_info"] = [{"problem": "What is it?"}]
    with LiveServer(stub_server()[0]) as url:
        manager = verl_rewards.PRMStepRewardManager(config(url=url), tokenizer)
        with pytest.raises(ValueError, match=r"extra_info\['question'\] holds no prompt \(extra_info keys: "
                                             r"\['problem'\]\).*reward.prmkit.prompt_key"):
            asyncio.run(manager.run_single(rows[0:1]))


def test_the_manager_waits_for_a_server_that_answers_503_while_it_starts(verl_rewards, tokenizer):
    app, health_calls = stub_server(starting=3)
    with LiveServer(app) as url:
        manager = verl_rewards.PRMStepRewardManager(config(url=url, ready_timeout_s=30), tokenizer)
    assert len(health_calls) == 4 and manager.prm.separator == SEPARATOR


def test_a_server_that_never_gets_ready_is_named_after_the_timeout(verl_rewards, tokenizer):
    app, health_calls = stub_server(starting=10 ** 6)
    with LiveServer(app) as url:
        with pytest.raises(PRMError, match=r"/health did not answer ready within 0.3 s: it answered 503 "
                                           r"\{\"status\":\"starting\"\}.*reward.prmkit.ready_timeout_s"):
            verl_rewards.PRMStepRewardManager(config(url=url, ready_timeout_s=0.3), tokenizer)
    assert len(health_calls) > 1  # it asked again before giving up
    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PRMError, match=r"did not answer ready within 0.2 s: it could not be reached \(Connect"):
        verl_rewards.PRMStepRewardManager(config(url=nobody, ready_timeout_s=0.2), tokenizer)
