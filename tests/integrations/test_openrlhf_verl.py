"""prmkit serve as the reward of OpenRLHF and verl, called the way each calls it, on a real tiny PRM.

OpenRLHF (0.11.2 on PyPI, `openrlhf/utils/agent.py`, `SingleTurnAgentExecutor._fetch_rewards_via_http`) posts
`{"query": [prompt + response], "prompts": [prompt], "labels": [label]}` with aiohttp (180 s timeout), calls
`raise_for_status()`, reads `scores` (falling back to `rewards`) and `extra_logs` from the JSON, and on any error
tries again after 1 s, five times in all, then raises (ending the RL job). Its query is the decoded prompt and
response tokens with special tokens kept. 0.6.3's `openrlhf/utils/remote_rm_utils.py` sends the same body with
`requests` and reads `rewards`. OpenRLHF itself is not installed here: `openrlhf_post` below does what those lines
do, so a sample that would end an OpenRLHF run ends this test.

verl (0.9.1 on PyPI) loads `custom_reward_function.path`'s function by file (`verl/utils/import_utils.py`,
`load_extern_object`), merges `reward_kwargs` over the call's keyword arguments (`verl/trainer/ppo/reward.py`,
`get_custom_reward_fn`, which also asks `inspect.iscoroutinefunction` to pick the async wrapper), and calls it with
keywords `data_source`, `solution_str`, `ground_truth`, `extra_info` (with `num_turns` and `rollout_reward_scores`
added; `verl/workers/reward_manager/naive.py`), awaiting it in the reward loop when it is async
(`verl/experimental/reward_loop/reward_manager/naive.py`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import sys
from functools import partial
from pathlib import Path

import pytest

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp (OpenRLHF's HTTP client) comes with prmkit[dev]")

sys.path.insert(0, str(Path(__file__).parents[1] / "serving"))

from serve_helpers import LiveServer  # noqa: E402

from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.scoring.reward import PRMReward  # noqa: E402
from prmkit.scoring.scorer import PRMScorer  # noqa: E402
from prmkit.serving.app import create_app  # noqa: E402
from prmkit.serving.options import ServeOptions  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verl_compute_score.py"
TOL = 1e-5


@pytest.fixture(scope="module")
def scorer(tiny_run):
    return PRMScorer.from_pretrained(tiny_run, device="cpu", batch_size=8)


@pytest.fixture(scope="module")
def url(scorer):
    with LiveServer(create_app(scorer, ServeOptions(max_wait_ms=20))) as address:
        yield address


def samples(separator: str) -> list[tuple[str, str]]:
    """(prompt, response) pairs as a policy writes them, with the degenerate ones RL runs meet: a runaway of 600
    short steps, one step of 30,000 characters, a blank-line loop and an empty response."""
    records = generate_records(4, seed=31)
    pairs = [(r["prompt"], separator.join(r["completions"])) for r in records]
    prompt = records[0]["prompt"]
    return pairs + [(prompt, separator.join(["7 * 2 = 14."] * 600)), (prompt, "the answer is " + "9" * 30_000),
                    (prompt, "3 + 4 = 7." + "\n" * 5000), (prompt, "")]


async def openrlhf_post(url: str, payload: dict, attempts: list) -> dict:
    """One OpenRLHF reward request: five tries a second apart, any error (a non-2xx answer included) retried,
    then the exception that ends the run."""
    timeout = aiohttp.ClientTimeout(total=180)
    for _ in range(5):
        attempts.append(payload)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.post(url, json=payload) as response:
                    response.raise_for_status()
                    return await response.json()
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(1)
    raise RuntimeError("Request error for 5 times")


def test_openrlhf_requests_get_a_reward_for_every_sample_and_match_the_in_process_reward(url, scorer):
    eos = scorer.tokenizer.eos_token
    pairs = samples(scorer.metadata.separator)
    attempts: list = []

    async def rollouts():  # each rollout posts its own sample, all at once, as OpenRLHF's vLLM workers do
        return await asyncio.gather(*(openrlhf_post(f"{url}/get_reward", {
            "query": [f"<|user|>{p}<|assistant|>" + r + eos], "prompts": [f"<|user|>{p}<|assistant|>"],
            "labels": ["14"]}, attempts) for p, r in pairs))

    answers = asyncio.run(rollouts())
    assert len(attempts) == len(pairs)  # every sample answered on its first try
    local = PRMReward(scorer, aggregate="min")
    want = local([f"<|user|>{p}<|assistant|>" for p, _ in pairs], [r for _, r in pairs])
    got = [a["scores"] if a.get("scores") is not None else a["rewards"] for a in answers]
    assert [len(g) for g in got] == [1] * len(pairs)
    assert [g[0] for g in got] == pytest.approx(want, abs=TOL)
    assert [a["truncated"][0] for a in answers][4:6] == [True, True]  # the runaway and the 30,000 characters
    assert all(len(v) == 1 for a in answers for v in a["extra_logs"].values())  # one number per sample
    assert answers[-1]["rewards"] == [0.0]  # an empty response gets the floor

    floored = PRMReward(scorer, aggregate="min", truncated="floor")
    with LiveServer(create_app(scorer, ServeOptions(truncated="floor"))) as strict:
        answer = asyncio.run(openrlhf_post(f"{strict}/get_reward", {
            "query": [p + r for p, r in pairs], "prompts": [p for p, _ in pairs], "labels": [""] * len(pairs)},
            attempts))
    assert answer["rewards"] == pytest.approx(floored([p for p, _ in pairs], [r for _, r in pairs]), abs=TOL)
    assert answer["rewards"][4] == answer["rewards"][5] == 0.0


def load_as_verl(name: str, reward_kwargs: dict):
    spec = importlib.util.spec_from_file_location("custom_module", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw = getattr(module, name)

    def merged(*args, **kwargs):
        return raw(*args, **{**kwargs, **reward_kwargs})

    async def merged_async(*args, **kwargs):
        return await raw(*args, **{**kwargs, **reward_kwargs})

    return raw, partial(merged_async if inspect.iscoroutinefunction(raw) else merged)


def test_verl_calls_the_example_reward_function_for_every_sample(url, scorer):
    pairs = samples(scorer.metadata.separator)
    for kwargs in ({}, {"aggregate": "last", "truncated": "floor", "floor": -1.0}):
        local = PRMReward(scorer, **kwargs)
        want = local([p for p, _ in pairs], [r for _, r in pairs])
        raw, compute_score = load_as_verl("compute_score", {"url": url, **kwargs})
        raw_async, compute_score_async = load_as_verl("compute_score_async", {"url": url, **kwargs})
        assert not inspect.iscoroutinefunction(raw) and inspect.iscoroutinefunction(raw_async)

        def call(fn, prompt, response):
            return fn(data_source="openai/gsm8k", solution_str=response, ground_truth="14",
                      extra_info={"split": "train", "index": 0, "question": prompt, "num_turns": None,
                                  "rollout_reward_scores": {}})

        got = [call(compute_score, p, r) for p, r in pairs]

        async def reward_loop():
            return await asyncio.gather(*(call(compute_score_async, p, r) for p, r in pairs))

        assert got == pytest.approx(want, abs=TOL)
        assert asyncio.run(reward_loop()) == pytest.approx(want, abs=TOL)
