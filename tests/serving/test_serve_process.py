"""`prmkit serve` as a process: it starts from the command line, requires the token from the environment, and on
SIGTERM answers every request it had accepted before it exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from serve_helpers import free_port  # noqa: E402

from prmkit.cli.serve import exposure_warning  # noqa: E402
from prmkit.data.synthetic import generate_records  # noqa: E402
from prmkit.serving.options import ServeOptions  # noqa: E402

TOKEN = "process-token"


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            response = httpx.get(f"{url}/health", timeout=2)
            if response.status_code == 200:
                return response.json()
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become healthy")


@pytest.mark.slow
def test_sigterm_answers_every_accepted_request_then_exits_0(tiny_run):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PRMKIT_SERVE_TOKEN": TOKEN}
    # One batch of 64 waits up to 3 s to fill, so the 32 requests below sit accepted in the queue at SIGTERM.
    proc = subprocess.Popen([sys.executable, "-m", "prmkit", "serve", str(tiny_run), "--port", str(port),
                             "--device", "cpu", "--batch-size", "64", "--max-wait-ms", "3000"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_healthy(url, proc)
        assert httpx.post(f"{url}/v1/score", json={"prompt": "p", "steps": ["s"]}).status_code == 401
        records = generate_records(32, seed=9)

        async def clients():
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                         timeout=60) as http:
                sent = [asyncio.ensure_future(http.post("/v1/score", json={"prompt": r["prompt"],
                                                                            "steps": r["completions"]}))
                        for r in records]
                deadline = time.monotonic() + 30
                while (await http.get("/health")).json().get("queued_chains", 0) < len(records):
                    assert time.monotonic() < deadline, "the requests were not all queued"
                    await asyncio.sleep(0.02)
                proc.send_signal(signal.SIGTERM)
                return await asyncio.gather(*sent)

        answers = asyncio.run(clients())
        assert [a.status_code for a in answers] == [200] * len(records)
        assert all(len(a.json()["step_scores"]) == len(r["completions"]) for a, r in zip(answers, records))
        assert proc.wait(timeout=60) == 0
        stderr = proc.stderr.read().decode()
        assert "Traceback" not in stderr and "every accepted request was answered" in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_warns_when_reachable_from_elsewhere_without_a_token():
    assert exposure_warning(ServeOptions(), None) is None
    assert exposure_warning(ServeOptions(host="localhost"), None) is None
    assert exposure_warning(ServeOptions(host="::1"), None) is None
    assert exposure_warning(ServeOptions(host="0.0.0.0"), "t") is None
    message = exposure_warning(ServeOptions(host="0.0.0.0"), None)
    assert "0.0.0.0" in message and "PRMKIT_SERVE_TOKEN" in message
