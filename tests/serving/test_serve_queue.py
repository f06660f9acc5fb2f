"""The server's behaviour around the model, with a fake scorer (no model, so fast): coalescing, the queue limit,
a failing batch, bad requests beside good ones, every bad-input class, the token, and draining at shutdown."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from serve_helpers import FakeScorer, LiveServer  # noqa: E402

from prmkit.serving.app import create_app  # noqa: E402
from prmkit.serving.batcher import MicroBatcher, ShuttingDown  # noqa: E402
from prmkit.serving.metrics import ServeMetrics  # noqa: E402
from prmkit.serving.options import ServeOptions  # noqa: E402

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def run(coro):
    return asyncio.run(coro)


def good(i: int) -> dict:
    return {"prompt": f"problem {i}", "steps": ["a" * i, "bb"]}


async def post_all(url: str, bodies: list, path: str = "/v1/score", headers=AUTH) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        return await asyncio.gather(*(client.post(path, json=b) if not isinstance(b, bytes)
                                      else client.post(path, content=b) for b in bodies))


async def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_batcher_takes_whole_requests_up_to_max_chains():
    fake = FakeScorer()

    async def go():
        batcher = MicroBatcher(fake.score_many, max_chains=4, max_wait_s=0.05, queue_limit=100,
                               metrics=ServeMetrics())
        batcher.start()
        sizes = [1, 6, 1] + [1] * 5
        chains = [[(f"p{i}", ["s"])] * n for i, n in enumerate(sizes)]
        results = await asyncio.gather(*(batcher.submit(c) for c in chains))
        await batcher.close()
        return chains, results

    chains, results = run(go())
    # Whole requests up to the limit: the 6-chain request is never split and runs alone; single chains are
    # coalesced (the first runs alone as the 6-chain request follows it in the round).
    assert fake.calls == [1, 6, 4, 2]
    for sent, got in zip(chains, results):
        assert got == [FakeScorer.expected(p, s) for p, s in sent]


def test_under_load_a_batch_groups_requests_of_similar_length():
    import threading

    fake = FakeScorer(gate=threading.Event())

    async def go():
        batcher = MicroBatcher(fake.score_many, max_chains=3, max_wait_s=0.0, queue_limit=100,
                               metrics=ServeMetrics())
        batcher.start()
        first = asyncio.ensure_future(batcher.submit([("p", ["x"])]))
        await wait_for(lambda: fake.calls)  # the model thread is busy: the rest queues up
        sizes = [10, 1000] * 3
        rest = [asyncio.ensure_future(batcher.submit([(f"q{i}", ["y" * n])])) for i, n in enumerate(sizes)]
        await asyncio.sleep(0.05)
        fake.gate.set()
        await asyncio.gather(first, *rest)
        await batcher.close()

    run(go())
    lengths = [sorted({len(steps[0]) for _, steps in batch}) for batch in fake.batches[1:]]
    assert lengths == [[10], [1000]]  # not three mixed batches in arrival order


def test_close_answers_everything_accepted_then_refuses():
    fake = FakeScorer(delay_s=0.05)

    async def go():
        batcher = MicroBatcher(fake.score_many, max_chains=2, max_wait_s=0.0, queue_limit=100,
                               metrics=ServeMetrics())
        batcher.start()
        tasks = [asyncio.create_task(batcher.submit([(f"p{i}", ["x"])])) for i in range(7)]
        await asyncio.sleep(0.01)  # all queued, the first batch running
        await batcher.close()
        assert all(t.done() for t in tasks)
        with pytest.raises(ShuttingDown):
            await batcher.submit([("p", ["x"])])
        return [t.result() for t in tasks]

    assert run(go()) == [[FakeScorer.expected(f"p{i}", ["x"])] for i in range(7)]


@pytest.fixture()
def fake():
    return FakeScorer()


def serve(fake, **options):
    return LiveServer(create_app(fake, ServeOptions(**options), token=TOKEN, model_name="fake"))


def test_full_queue_answers_503_with_retry_after_and_accepted_requests_still_finish(fake):
    import threading

    fake.gate = threading.Event()

    async def go(url):
        first = asyncio.ensure_future(post_all(url, [good(i) for i in range(4)]))
        await wait_for(lambda: fake.calls)  # the first batch holds the model thread
        queued = asyncio.ensure_future(post_all(url, [good(i) for i in range(8)]))
        await asyncio.sleep(0.2)  # the queue now holds 8 chains, its limit
        refused = (await post_all(url, [good(99)]))[0]
        fake.gate.set()
        return refused, await first + await queued

    with serve(fake, max_request_chains=8, queue_limit=8) as url:
        refused, accepted = run(go(url))
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["kind"] == "overloaded"
    assert [r.status_code for r in accepted] == [200] * 12


def test_failed_batch_is_a_503_and_the_server_keeps_serving(fake):
    fake.fail = 1
    with serve(fake) as url:
        failed = run(post_all(url, [good(1)]))[0]
        ok = run(post_all(url, [good(2)]))[0]
        metrics = httpx.get(f"{url}/metrics", headers=AUTH).text
    assert failed.status_code == 503 and failed.headers["retry-after"] == "1"
    assert failed.json()["error"]["kind"] == "batch_failed" and "out of memory" in failed.json()["error"]["message"]
    assert ok.status_code == 200 and ok.json()["step_scores"] == FakeScorer.expected("problem 2", ["aa", "bb"])
    assert 'prmkit_errors_total{endpoint="/v1/score",kind="batch_failed"} 1.0' in metrics


def test_a_nan_score_gives_its_chain_the_floor_and_leaves_the_batch_alone(fake):
    real = fake.score_many
    fake.score_many = lambda chains: [[float("nan")] * len(steps) if "nan" in prompt else s
                                      for (prompt, steps), s in zip(chains, real(chains))]
    with serve(fake, max_wait_ms=200) as url:
        answers = run(post_all(url, [{"prompt": "a nan", "steps": ["x", "y"]}, good(1)]))
        reward = run(post_all(url, [{"query": ["a nan x"], "prompts": ["a nan"]}], "/get_reward"))[0]
        metrics = httpx.get(f"{url}/metrics", headers=AUTH).text
    assert [a.status_code for a in answers] == [200, 200] and reward.status_code == 200
    assert answers[0].json()["step_scores"] == [None, None] and answers[0].json()["score"] is None
    assert answers[1].json()["step_scores"] == FakeScorer.expected("problem 1", ["a", "bb"])
    assert reward.json()["rewards"] == [0.0] and reward.json()["step_scores"] == [[None]]
    assert "prmkit_nonfinite_chains_total 2.0" in metrics


def test_health_probes_the_model_after_a_failed_batch(fake):
    fake.fail = 2  # the request's batch fails, then the first probe: the device is still broken
    with serve(fake) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        failed = run(post_all(url, [good(1)]))[0]
        broken = httpx.get(f"{url}/health")
        healed = httpx.get(f"{url}/health")
        ok = run(post_all(url, [good(2)]))[0]
    assert failed.status_code == 503
    assert broken.status_code == 503 and broken.json()["status"] == "unhealthy"
    assert "out of memory" in broken.json()["error"]
    assert healed.status_code == 200 and healed.json()["status"] == "ok" and ok.status_code == 200


def test_a_request_whose_client_left_is_never_scored(fake):
    import threading

    fake.gate = threading.Event()  # the first batch holds the model thread, so the next request waits queued

    async def go(url):
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30) as client:
            first = asyncio.ensure_future(client.post("/v1/score", json=good(1)))
            await wait_for(lambda: fake.calls)
            abandoned = asyncio.ensure_future(client.post("/v1/score", json={"prompt": "gone", "steps": ["x"]}))
            await wait_for(lambda: httpx.get(f"{url}/health").json()["queued_chains"] == 1)
            abandoned.cancel()  # the client gives up: httpx closes the connection
            await asyncio.sleep(0.3)  # the server sees the disconnect
            fake.gate.set()
            await first
            later = await client.post("/v1/score", json=good(2))
            return later, (await client.get("/metrics")).text

    with serve(fake) as url:
        later, metrics = run(go(url))
    assert later.status_code == 200
    assert all(prompt != "gone" for batch in fake.batches for prompt, _ in batch)
    assert "prmkit_dropped_chains_total 1.0" in metrics
    assert 'prmkit_errors_total{endpoint="/v1/score",kind="client_gone"} 1.0' in metrics


def test_chains_over_the_size_limits_are_scored_as_far_as_they_go(bad_input_server_fake):
    url, fake = bad_input_server_fake
    many = {"prompt": "p", "steps": [f"s{i}" for i in range(12)]}  # max_steps=8
    huge = {"prompt": "p", "completion": "ok\n\n" + "x" * 101 + "\n\nafter"}  # max_step_chars=100
    answers = run(post_all(url, [many, huge]))
    rewards = run(post_all(url, [{"query": ["p" + "\n\n".join(["y"] * 9)], "prompts": ["p"]}], "/get_reward"))
    classify = run(post_all(url, [{"model": "m", "input": "p\n\nok\n\n" + "z" * 150}], "/classify"))
    assert [a.status_code for a in answers + rewards + classify] == [200] * 4
    first, second = answers[0].json(), answers[1].json()
    assert first["truncated"] is True and first["step_scores"][8:] == [None] * 4
    assert first["step_scores"][:8] == FakeScorer.expected("p", many["steps"][:8])
    assert second["truncated"] is True and second["step_scores"] == [FakeScorer.expected("p", ["ok"])[0], None, None]
    assert rewards[0].json()["truncated"] == [True] and rewards[0].json()["extra_logs"]["prm_truncated"] == [1.0]
    assert rewards[0].json()["rewards"] == [min(FakeScorer.expected("p", ["y"] * 8))]
    assert classify[0].json()["data"][0]["truncated"] is True
    seen = [steps for batch in fake.batches for _, steps in batch]
    assert max(map(len, seen)) <= 8 and all(len(step) <= 100 for steps in seen for step in steps)


def test_bad_requests_in_the_same_moment_leave_good_answers_intact(fake):
    import threading

    fake.gate = threading.Event()
    bad = [{"prompt": "", "steps": ["x"]}, {"prompt": "p", "steps": [3]}, b"{not json", {"prompt": "p"}]

    async def go(url):
        pending = asyncio.ensure_future(post_all(url, [good(i) for i in range(12)] + bad))
        await wait_for(lambda: fake.calls)
        await asyncio.sleep(0.1)
        fake.gate.set()
        return await pending

    with serve(fake) as url:
        answers = run(go(url))
    for i, response in enumerate(answers[:12]):
        assert response.status_code == 200
        assert response.json()["step_scores"] == FakeScorer.expected(f"problem {i}", ["a" * i, "bb"])
    assert [r.status_code for r in answers[12:]] == [422, 422, 400, 422]
    assert sum(fake.calls) == 12  # no bad chain reached the model


BAD_INPUTS = [
    # (path, body, status, kind, field)
    ("/v1/score", b"{not json", 400, "not_json", "body"),
    ("/v1/score", b"[1, 2]", 422, "invalid", "body"),
    ("/v1/score", {"prompt": 5, "steps": ["a"]}, 422, "invalid", "prompt"),
    ("/v1/score", {"prompt": "  ", "steps": ["a"]}, 422, "invalid", "prompt"),
    ("/v1/score", {"steps": ["a"]}, 422, "invalid", "prompt"),
    ("/v1/score", {"prompt": "p", "steps": "a"}, 422, "invalid", "steps"),
    ("/v1/score", {"prompt": "p", "steps": ["a", 2]}, 422, "invalid", "steps[1]"),
    ("/v1/score", {"prompt": "p"}, 422, "invalid", "steps"),
    ("/v1/score", {"prompt": "p", "candidates": ["a"] * 5}, 422, "too_large", "candidates"),
    ("/v1/score", {"prompt": "p", "candidates": []}, 422, "invalid", "candidates"),
    ("/v1/score", {"prompt": "p", "candidates": [{"x": 1}]}, 422, "invalid", "candidates[0]"),
    ("/v1/score", {"prompt": "p", "steps": ["a"], "aggregate": "median"}, 422, "invalid", "aggregate"),
    ("/v1/score", b'{"prompt": "\\ud800", "steps": ["a"]}', 422, "invalid", "prompt"),
    ("/v1/score", b'{"prompt": "p", "steps": ["a"]' + b" " * 3000 + b"}", 413, "too_large", "body"),
    ("/get_reward", {"query": ["p1 answer"], "prompts": ["p2"]}, 422, "invalid", "query[0]"),
    ("/get_reward", {"query": ["p1 answer"]}, 422, "invalid", "prompts"),
    ("/get_reward", {"query": ["a", "b"], "prompts": ["a"]}, 422, "invalid", "prompts"),
    ("/get_reward", {"query": "p1", "prompts": ["p1"]}, 422, "invalid", "query"),
    ("/classify", {"model": "m", "input": [[1, 2, 3]]}, 422, "invalid", "input[0]"),
    ("/classify", {"model": "m"}, 422, "invalid", "input"),
]


@pytest.mark.parametrize("path,body,status,kind,field", BAD_INPUTS,
                         ids=[f"{p}:{k}:{f}:{i}" for i, (p, _, _, k, f) in enumerate(BAD_INPUTS)])
def test_every_bad_input_is_a_4xx_naming_the_field(bad_input_server, path, body, status, kind, field):
    response = run(post_all(bad_input_server, [body], path))[0]
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["kind"] == kind and error["field"] == field
    assert error["message"].startswith(field) or field in error["message"]
    assert "Traceback" not in response.text


@pytest.fixture(scope="module")
def bad_input_server_fake():
    options = dict(max_steps=8, max_step_chars=100, max_request_chains=4, queue_limit=16, max_body_bytes=2048)
    fake = FakeScorer()
    with LiveServer(create_app(fake, ServeOptions(**options), token=TOKEN, model_name="fake")) as url:
        yield url, fake


@pytest.fixture(scope="module")
def bad_input_server(bad_input_server_fake):
    return bad_input_server_fake[0]


def test_token_is_required_everywhere_but_health(bad_input_server):
    body = json.dumps(good(1)).encode()
    missing = httpx.post(f"{bad_input_server}/v1/score", content=body)
    wrong = httpx.post(f"{bad_input_server}/v1/score", content=body, headers={"Authorization": "Bearer nope"})
    right = httpx.post(f"{bad_input_server}/v1/score", content=body, headers=AUTH)
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["field"] == "Authorization" and "missing" in missing.json()["error"]["message"]
    assert right.status_code == 200
    assert httpx.get(f"{bad_input_server}/metrics").status_code == 401
    assert httpx.get(f"{bad_input_server}/health").status_code == 200


def test_an_oversized_streamed_body_is_refused(bad_input_server):
    chunks = iter([b'{"prompt": "p", "steps": ["' + b"x" * 1024] + [b"x" * 1024] * 3 + [b'"]}'])
    response = httpx.post(f"{bad_input_server}/v1/score", content=chunks, headers=AUTH)  # chunked: no length
    assert response.status_code == 413 and response.json()["error"]["field"] == "body"


def test_unknown_paths_and_methods_are_json_errors(bad_input_server):
    missing = httpx.get(f"{bad_input_server}/nope", headers=AUTH)
    wrong_method = httpx.get(f"{bad_input_server}/v1/score", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["kind"] == "not_found"
    assert wrong_method.status_code == 405 and "/v1/score" in wrong_method.json()["error"]["message"]
