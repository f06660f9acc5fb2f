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
import functools
import os
from typing import Sequence

import httpx

from prmkit.errors import PRMError
from prmkit.scoring.aggregate import AGGREGATIONS, FLOOR, TRUNCATED, chain_reward, floor_steps, log_truncated_share
from prmkit.scoring.inputs import Separator, completion_text, prompt_text, split_steps
from prmkit.serving.options import ServeOptions


class RemotePRMReward(functools.partial):
    """Async reward: one aggregate PRM score per completion, computed by a remote `prmkit serve`.

    `aggregate`, `floor` and `truncated` as in `PRMReward`, applied here to the step scores the server returns.
    Completions are cut into steps by the server at the run's separator, unless `separator` is given here. A 503
    (queue full, or a failed batch) is retried after the server's Retry-After, up to `retries` times; any other
    error status raises PRMError with the server's message. The bearer token is read from the environment
    variable `token_env` (the server's default name) unless given.

    Why a `functools.partial`: TRL (and asyncio) decide that a reward is async with `inspect.iscoroutinefunction`,
    which before Python 3.12 is true only for a real `async def` function (or a partial of one), never for an
    object whose `__call__` is async; and TRL names the logged reward after the wrapped function. So the object is
    a partial of an `async def` made for it and named after the reward, which both checks read the same way on
    every Python prmkit supports.
    """

    def __new__(cls, url: str, *, aggregate: str = "min", floor: float | None = None, truncated: str = "kept",
                separator: Separator = None, token: str | None = None, token_env: str = ServeOptions.token_env,
                timeout_s: float = 600.0, max_concurrency: int = 256, retries: int = 30, name: str | None = None):
        if aggregate not in AGGREGATIONS:
            raise PRMError(f"aggregate={aggregate!r} is not known; use one of {', '.join(AGGREGATIONS)}")
        if truncated not in TRUNCATED:
            raise PRMError(f"truncated={truncated!r} is not known; use 'kept' or 'floor'")
        if max_concurrency < 1:
            raise PRMError(f"max_concurrency={max_concurrency}; use a positive number of requests in flight")
        settings = dict(url=url, aggregate=aggregate, floor=floor, truncated=truncated, separator=separator,
                        token=token, token_env=token_env, timeout_s=timeout_s, max_concurrency=max_concurrency,
                        retries=retries, name=name)

        async def reward(prompts: Sequence, completions: Sequence, **kwargs) -> list[float]:
            return await self.rewards(prompts, completions, **kwargs)

        reward.__name__ = reward.__qualname__ = name or f"prm_{aggregate}"  # TRL's name for the logged reward
        self = super().__new__(cls, reward)
        self.settings = settings
        self.__name__ = reward.__name__
        self.url = url.rstrip("/")
        self.aggregate = aggregate
        self.floor = FLOOR if floor is None else float(floor)
        self.truncated = truncated
        self.separator = separator
        self.token = token if token is not None else os.environ.get(token_env) or None
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.retries = retries
        return self

    def __reduce__(self):
        return _rebuild, (self.settings,)  # a partial pickles its function, which here is a closure

    def __repr__(self) -> str:
        return f"RemotePRMReward({self.url!r}, aggregate={self.aggregate!r}, name={self.__name__!r})"

    async def rewards(self, prompts: Sequence, completions: Sequence, **kwargs) -> list[float]:
        """One reward per completion; extra keyword arguments (dataset columns, trainer state) are ignored. TRL's
        `log_metric`, when passed, receives the share of completions the PRM could not read whole."""
        if len(prompts) != len(completions):
            raise PRMError(f"{len(prompts)} prompts for {len(completions)} completions; give one prompt per "
                           "completion (TRL repeats each prompt for its generations)")
        scores = await self.step_scores_many(prompts, completions)
        log_truncated_share(kwargs.get("log_metric"), self.__name__, scores)
        return [self.floor if s is None else chain_reward(s, self.aggregate, self.floor, self.truncated)
                for s in scores]

    async def step_rewards(self, prompt, completion) -> list[float]:
        """One reward per step of the completion, as PRMReward's: a step cut by max_length, or scored NaN or
        infinite (null from the server), gets the floor (`floor_steps`)."""
        scores = (await self.step_scores_many([prompt], [completion]))[0]
        return [] if scores is None else floor_steps(scores, self.floor)

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


def _rebuild(settings: dict) -> RemotePRMReward:
    return RemotePRMReward(**settings)


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
