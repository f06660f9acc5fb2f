"""`prmkit serve` with a real (tiny, trained) PRM on a loopback port: each endpoint's answer, the same scores as
`prmkit score` and the in-process reward, and concurrent single-chain clients batched together."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).parent))

from serve_helpers import LiveServer  # noqa: E402

from prmkit.cli import main  # noqa: E402
from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.files import write_jsonl  # noqa: E402
from prmkit.scoring.aggregate import aggregate  # noqa: E402
from prmkit.scoring.reward import PRMReward  # noqa: E402
from prmkit.scoring.scorer import PRMScorer  # noqa: E402
from prmkit.serving.app import create_app  # noqa: E402
from prmkit.serving.clients import RemotePRMReward  # noqa: E402
from prmkit.serving.options import ServeOptions  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def scorer(tiny_run):
    return PRMScorer.from_pretrained(tiny_run, device="cpu", batch_size=8)


@pytest.fixture(scope="module")
def url(scorer):
    with LiveServer(create_app(scorer, ServeOptions(max_wait_ms=50), model_name="tiny")) as address:
        yield address


@pytest.fixture(scope="module")
def records():
    return generate_records(6, seed=21)


def post(url: str, path: str, body: dict) -> dict:
    response = httpx.post(f"{url}{path}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def close(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    return abs(a - b) <= TOL


def prmkit_score(tmp_path, run, rows) -> list[dict]:
    write_jsonl(rows, tmp_path / "in.jsonl")
    assert main(["score", str(run), str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), "--device", "cpu"]) == 0
    return [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]


def test_v1_score_answers_as_prmkit_score_for_each_form(url, tiny_run, records, scorer, tmp_path):
    sep = scorer.metadata.separator
    record = records[0]
    rows = [{"prompt": record["prompt"], "completions": record["completions"]},
            {"prompt": record["prompt"], "completion": sep.join(record["completions"])},
            {"prompt": record["prompt"], "candidates": [r["completions"] for r in records[:3]] + [
                sep.join(records[3]["completions"])]}]
    expected = prmkit_score(tmp_path, tiny_run, rows)

    steps = post(url, "/v1/score", {"prompt": record["prompt"], "steps": record["completions"]})
    assert set(steps) == {"step_scores", "score", "truncated"} and steps["truncated"] == expected[0]["truncated"] and close(steps["step_scores"], expected[0]["step_scores"])
    assert close(steps["score"], expected[0]["score"])

    cut = post(url, "/v1/score", rows[1])
    assert set(cut) == {"steps", "step_scores", "score", "truncated"} and cut["steps"] == record["completions"]
    assert close(cut["step_scores"], expected[1]["step_scores"])

    best = post(url, "/v1/score", rows[2])
    assert set(best) == {"candidate_steps", "step_scores", "scores", "best", "truncated"}
    assert best["truncated"] == expected[2]["truncated"]
    assert close(best["step_scores"], expected[2]["step_scores"]) and close(best["scores"], expected[2]["scores"])
    assert best["best"] == expected[2]["best"]


def test_get_reward_is_openrlhf_shaped_and_scores_as_prmkit_score(url, tiny_run, records, scorer, tmp_path):
    sep = scorer.metadata.separator
    prompts = [f"<|user|>{r['prompt']}<|assistant|>" for r in records]
    queries = [p + sep.join(r["completions"]) + "</s>" for p, r in zip(prompts, records)]  # the EOS is dropped
    queries.append(prompts[0])  # an empty response: the floor
    answer = post(url, "/get_reward", {"query": queries, "prompts": prompts + prompts[:1], "labels": [""] * 7})
    expected = prmkit_score(tmp_path, tiny_run, [{"prompt": p, "completions": r["completions"]}
                                                 for p, r in zip(prompts, records)])
    assert set(answer) == {"rewards", "scores", "step_scores", "truncated", "extra_logs"}
    assert answer["truncated"][:6] == [row["truncated"] for row in expected] and answer["truncated"][6] is False
    assert close(answer["step_scores"][:6], [row["step_scores"] for row in expected])
    assert close(answer["rewards"][:6], [row["score"] for row in expected]) and answer["rewards"][6] == 0.0
    assert answer["scores"] == answer["rewards"] and answer["step_scores"][6] == []
    logs = answer["extra_logs"]
    assert set(logs) == {"prm_steps", "prm_unscored_steps", "prm_truncated", "prm_min_step", "prm_mean_step",
                         "prm_last_step"}
    assert all(len(v) == 7 and all(isinstance(x, (int, float)) for x in v) for v in logs.values())
    assert logs["prm_steps"][:6] == [len(r["completions"]) for r in records]


def test_classify_is_the_vllm_subset_verl_reads(url, records, scorer):
    sep = scorer.metadata.separator
    inputs = [sep.join([r["prompt"], *r["completions"]]) for r in records[:3]]
    answer = post(url, "/classify", {"model": "my-prm", "input": inputs, "activation": False})
    assert {"id", "object", "created", "model", "data"} <= set(answer) and answer["model"] == "my-prm"
    assert answer["object"] == "list" and answer["id"].startswith("classify-")
    expected = scorer.score_many([(r["prompt"], r["completions"]) for r in records[:3]])
    for i, item in enumerate(answer["data"]):
        assert item["index"] == i and item["num_classes"] == 1 and len(item["probs"]) == 1
        assert close(item["step_scores"], expected[i]) and close(item["probs"][-1], aggregate(expected[i], "min"))
    one = post(url, "/classify", {"model": "m", "input": inputs[0]})  # verl sends one string per request
    chat = post(url, "/classify", {"model": "m", "messages": [
        {"role": "user", "content": records[0]["prompt"]},
        {"role": "assistant", "content": sep.join(records[0]["completions"])}]})
    assert close(one["data"][-1]["probs"][-1], answer["data"][0]["probs"][0])
    assert close(chat["data"][-1]["step_scores"], expected[0])


def test_health_and_metrics(url, scorer):
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["separator"] == scorer.metadata.separator
    assert health["batch_size"] == 8 and health["device"] == "cpu"
    metrics = httpx.get(f"{url}/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    names = {family.name for family in text_string_to_metric_families(metrics.text)}
    assert {"prmkit_requests", "prmkit_errors", "prmkit_queue_chains", "prmkit_batch_chains",
            "prmkit_request_seconds", "prmkit_chains"} <= names


class HeldFirstCall:
    """The real scorer, its first model call held until `release` is set: requests that arrive meanwhile queue up
    behind it, as they do behind a long forward pass under load."""

    def __init__(self, scorer):
        self.scorer, self.calls = scorer, []
        self.entered, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):  # batch_size, metadata, tokenizer, device: the real scorer's
        return getattr(self.scorer, name)

    def score_many(self, chains):
        self.calls.append(len(chains))
        if len(self.calls) == 1:
            self.entered.set()
            self.release.wait(timeout=60)
        return self.scorer.score_many(chains)


def queued_chains(metrics: str) -> float:
    for family in text_string_to_metric_families(metrics):
        if family.name == "prmkit_queue_chains":
            return family.samples[0].value
    raise AssertionError("no prmkit_queue_chains in /metrics")


def test_32_concurrent_single_chain_clients_are_batched_and_each_gets_its_own_scores(scorer):
    chains = [(r["prompt"], r["completions"]) for r in generate_records(32, seed=5)]
    held = HeldFirstCall(scorer)  # batch_size 8: at most 8 chains per model call

    async def client(url, prompt, steps):
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:  # one connection per client, as workers
            return (await http.post("/v1/score", json={"prompt": prompt, "steps": steps})).json()

    async def go(url):
        clients = [asyncio.create_task(client(url, p, s)) for p, s in chains]
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            deadline = time.monotonic() + 60
            # every chain but the held call's is accepted and waiting before the model is let go
            while not held.entered.is_set() or queued_chains((await http.get("/metrics")).text) < 32 - held.calls[0]:
                assert time.monotonic() < deadline, f"the clients never all queued: {held.calls}"
                await asyncio.sleep(0.01)
        held.release.set()
        return await asyncio.gather(*clients)

    with LiveServer(create_app(held, ServeOptions(max_wait_ms=50), model_name="tiny")) as url:
        answers = asyncio.run(go(url))
    assert sum(held.calls) == 32 and max(held.calls) <= 8
    # The held call, then the queue cut into batches of 8 in at most two planning rounds (each may end in one
    # partial batch): 5 model calls at most for 32 chains, where scoring each request alone would make 32.
    assert len(held.calls) <= 5, held.calls
    expected = scorer.score_many(chains)
    for answer, want in zip(answers, expected):
        assert close(answer["step_scores"], want)


def test_remote_reward_matches_the_in_process_reward(url, scorer, records):
    prompts = [r["prompt"] for r in records] + ["p", "q"]
    completions = [scorer.metadata.separator.join(r["completions"]) for r in records] + ["   ", [
        {"role": "assistant", "content": records[0]["completions"][0]}]]
    for kwargs in ({}, {"aggregate": "mean", "floor": -1.0}, {"truncated": "floor"}):
        remote = RemotePRMReward(url, **kwargs)
        local = PRMReward(scorer, **kwargs)
        assert close(asyncio.run(remote(prompts=prompts, completions=completions)),
                     local(prompts=prompts, completions=completions))
        assert remote.__name__ == local.__name__
    assert close(asyncio.run(RemotePRMReward(url).step_rewards(prompts[0], completions[0])),
                 PRMReward(scorer).step_rewards(prompts[0], completions[0]))


def test_verl_compute_score_example_gives_the_in_process_reward(url, scorer, records):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "verl_compute_score.py"
    spec = importlib.util.spec_from_file_location("verl_compute_score", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    sep = scorer.metadata.separator
    for kwargs in ({}, {"aggregate": "last", "truncated": "floor", "floor": -1.0}):
        local = PRMReward(scorer, **kwargs)
        for record in records[:3] + [{"prompt": "p", "completions": []}]:
            solution = sep.join(record["completions"])
            want = local(prompts=[record["prompt"]], completions=[solution])[0]
            info = {"question": record["prompt"]}
            got = example.compute_score("gsm8k", solution, "42", info, url=url, **kwargs)
            got_async = asyncio.run(example.compute_score_async("gsm8k", solution, "42", info, url=url, **kwargs))
            assert close(got, want) and close(got_async, want)
    with pytest.raises(ValueError, match="extra_info\\['question'\\] holds no prompt"):
        example.compute_score("gsm8k", "x", "42", {}, url=url)
