"""A verl reward function that asks a `prmkit serve` server for the PRM reward of each rollout.

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)` once per sample;
the prompt is read from `extra_info[prompt_key]` (verl's data preprocessing scripts store the problem there as
"question"; store it there in yours). The server cuts the solution into steps at the PRM's separator, scores every
step and batches this request with the other workers' requests. The reward follows PRMReward's rules: the chosen
aggregate of the step scores, `floor` for a solution with no step, and with truncated="floor" the floor for a
solution cut by the PRM's max_length.

    prmkit serve runs/prm --port 8000
    python -m verl.trainer.main_ppo ... \\
        reward.custom_reward_function.path=examples/verl_compute_score.py \\
        reward.custom_reward_function.name=compute_score \\
        +reward.custom_reward_function.reward_kwargs.url=http://127.0.0.1:8000

(Older verl releases read the same keys at the top level, without "reward.".) A runaway rollout (hundreds of steps,
a step of 30,000 characters) is answered with a reward by the server, never an error that would fail verl's
batch: the server scores it as far as its size limits allow and marks it truncated.

`compute_score_async` is the same reward for verl's reward loop, which awaits async reward functions so many
samples are in flight at once (the server batches them). It needs only httpx; a token set in the server's
environment variable (PRMKIT_SERVE_TOKEN) is read from the same variable here.
"""

from __future__ import annotations

import asyncio
import os
import time

import httpx

DEFAULT_URL = os.environ.get("PRMKIT_URL", "http://127.0.0.1:8000")
RETRIES = 30  # 503s (queue full, failed batch) retried after the server's Retry-After

_sync_client: httpx.Client | None = None  # one pooled client for the process; httpx.Client is thread-safe


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *, url: str = DEFAULT_URL,
                  prompt_key: str = "question", aggregate: str = "min", floor: float = 0.0,
                  truncated: str = "kept", timeout_s: float = 600.0, **kwargs) -> float:
    global _sync_client
    body = _body(solution_str, extra_info, prompt_key, aggregate)
    if body is None:
        return float(floor)
    if _sync_client is None:
        _sync_client = httpx.Client(headers=_headers(), timeout=timeout_s)
    for _ in range(RETRIES + 1):
        response = _sync_client.post(f"{url.rstrip('/')}/v1/score", json=body)
        if response.status_code != 503:
            break
        time.sleep(_retry_after(response))
    return _reward(response, floor, truncated)


async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None, *, url: str = DEFAULT_URL,
                              prompt_key: str = "question", aggregate: str = "min", floor: float = 0.0,
                              truncated: str = "kept", timeout_s: float = 600.0, **kwargs) -> float:
    body = _body(solution_str, extra_info, prompt_key, aggregate)
    if body is None:
        return float(floor)
    # A client per call: an async client belongs to the event loop that first used it.
    async with httpx.AsyncClient(headers=_headers(), timeout=timeout_s) as client:
        for _ in range(RETRIES + 1):
            response = await client.post(f"{url.rstrip('/')}/v1/score", json=body)
            if response.status_code != 503:
                break
            await asyncio.sleep(_retry_after(response))
    return _reward(response, floor, truncated)


def _body(solution_str: str, extra_info, prompt_key: str, aggregate: str) -> dict | None:
    prompt = (extra_info or {}).get(prompt_key)
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"extra_info[{prompt_key!r}] holds no prompt (extra_info keys: {sorted(extra_info or {})}); "
                         "store the problem text there in the dataset, or pass prompt_key= in reward_kwargs")
    if not solution_str or not solution_str.strip():
        return None  # nothing to score: the floor, as PRMReward gives
    return {"prompt": prompt, "completion": solution_str, "aggregate": aggregate}


def _headers() -> dict:
    token = os.environ.get("PRMKIT_SERVE_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _reward(response: httpx.Response, floor: float, truncated: str) -> float:
    if response.status_code != 200:
        raise RuntimeError(f"prmkit serve answered {response.status_code}: {response.text[:300]}")
    answer = response.json()
    if answer["score"] is None or (truncated == "floor" and None in answer["step_scores"]):
        return float(floor)
    return float(answer["score"])


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0
