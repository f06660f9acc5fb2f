"""`RemotePRMReward`: a `prmkit serve` server as an async reward function for TRL's GRPOTrainer.

    from prmkit.serving.clients import RemotePRMReward
    reward = RemotePRMReward("http://127.0.0.1:8000", aggregate="min")
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], ...)

It behaves as `PRMReward` (same floor and truncation rules, same name in TRL's logs) with the model in another
process or on another machine: each completion goes as its own POST /v1/score request, all of them at once, and
the server batches them with every other trainer process's requests. TRL runs async reward functions on an event
loop of their own, concurrently with the other reward functions.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Sequence

import httpx

from prmkit.errors import PRMError
from prmkit.scoring.aggregate import AGGREGATIONS, FLOOR, TRUNCATED, chain_reward
from prmkit.scoring.inputs import Separator, completion_text, prompt_text, split_steps
from prmkit.serving.options import ServeOptions


class RemotePRMReward:
    """Callable async reward: one aggregate PRM score per completion, computed by a remote `prmkit serve`.

    `aggregate`, `floor` and `truncated` as in `PRMReward`, applied here to the step scores the server returns.
    Completions are cut into steps by the server at the run's separator, unless `separator` is given here. A 503
    (queue full, or a failed batch) is retried after the server's Retry-After, up to `retries` times; any other
    error status raises PRMError with the server's message. The bearer token is read from the environment
    variable `token_env` (the server's default name) unless given.
    """

    def __init__(self, url: str, *, aggregate: str = "min", floor: float | None = None, truncated: str = "kept",
                 separator: Separator = None, token: str | None = None, token_env: str = ServeOptions.token_env,
                 timeout_s: float = 600.0, max_concurrency: int = 256, retries: int = 30, name: str | None = None):
        if aggregate not in AGGREGATIONS:
            raise PRMError(f"aggregate={aggregate!r} is not known; use one of {', '.join(AGGREGATIONS)}")
        if truncated not in TRUNCATED:
            raise PRMError(f"truncated={truncated!r} is not known; use 'kept' or 'floor'")
        if max_concurrency < 1:
            raise PRMError(f"max_concurrency={max_concurrency}; use a positive number of requests in flight")
        self.url = url.rstrip("/")
        self.aggregate = aggregate
        self.floor = FLOOR if floor is None else float(floor)
        self.truncated = truncated
        self.separator = separator
        self.token = token if token is not None else os.environ.get(token_env) or None
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.retries = retries
        self.__name__ = name or f"prm_{aggregate}"  # TRL names the logged reward column after this
        _mark_coroutine_function(self)

    async def __call__(self, prompts: Sequence, completions: Sequence, **kwargs) -> list[float]:
        """One reward per completion; extra keyword arguments (dataset columns, trainer state) are ignored."""
        if len(prompts) != len(completions):
            raise PRMError(f"{len(prompts)} prompts for {len(completions)} completions; give one prompt per "
                           "completion (TRL repeats each prompt for its generations)")
        scores = await self.step_scores_many(prompts, completions)
        return [self.floor if s is None else chain_reward(s, self.aggregate, self.floor, self.truncated)
                for s in scores]

    async def step_rewards(self, prompt, completion) -> list[float]:
        """One reward per step of the completion (a step cut by max_length gets the floor), as PRMReward's."""
        scores = (await self.step_scores_many([prompt], [completion]))[0]
        return [] if scores is None else [self.floor if s is None else float(s) for s in scores]

    async def step_scores_many(self, prompts: Sequence, completions: Sequence) -> list[list[float | None] | None]:
        """The server's step scores per completion; None for one with no step (it is not sent)."""
        bodies = [self._body(p, c) for p, c in zip(prompts, completions)]
        limit = asyncio.Semaphore(self.max_concurrency)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        limits = httpx.Limits(max_connections=self.max_concurrency)
        # One client per call: an httpx client belongs to the event loop that first used it, and TRL may call
        # from a loop of its own; a new connection per call costs little next to scoring.
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=self.timeout_s,
                                     limits=limits) as client:
            async def one(body: dict | None) -> list[float | None] | None:
                if body is None:
                    return None
                async with limit:
                    return (await self._post(client, body))["step_scores"]
            return list(await asyncio.gather(*(one(b) for b in bodies)))

    def _body(self, prompt, completion) -> dict | None:
        text = completion_text(completion)
        if self.separator is None:
            return {"prompt": prompt_text(prompt), "completion": text} if text.strip() else None
        steps = split_steps(text, self.separator)
        return {"prompt": prompt_text(prompt), "steps": steps} if steps else None

    async def _post(self, client: httpx.AsyncClient, body: dict) -> dict:
        for _ in range(self.retries + 1):
            try:
                response = await client.post("/v1/score", json=body)
            except httpx.TransportError as err:
                raise PRMError(f"cannot reach {self.url} ({type(err).__name__}: {err}); is `prmkit serve` running "
                               "there?") from None
            if response.status_code != 503:
                break
            await asyncio.sleep(_retry_after(response))
        if response.status_code != 200:
            raise PRMError(f"{self.url}/v1/score answered {response.status_code}: {_message(response)}")
        return response.json()


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def _message(response: httpx.Response) -> str:
    try:
        return response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def _mark_coroutine_function(reward: RemotePRMReward) -> None:
    """TRL runs a reward function on its async loop when `asyncio.iscoroutinefunction(func)` says so, which is
    false for an instance with an async __call__ unless the instance is marked: `inspect.markcoroutinefunction`
    where Python has it (3.12+), the attribute asyncio itself reads before that."""
    if hasattr(inspect, "markcoroutinefunction"):
        inspect.markcoroutinefunction(reward)
    else:
        reward._is_coroutine = asyncio.coroutines._is_coroutine
