"""Shared by the serving tests: a real uvicorn server on a loopback port in a background thread, and a fake scorer
for the tests of queueing and failures, which need no model."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    """`with LiveServer(app) as url:` serves the app on 127.0.0.1 for the block, lifespan included (so the
    micro-batcher runs), and stops it gracefully after."""

    def __init__(self, app):
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@dataclass
class FakeScorer:
    """What create_app reads from a PRMScorer. Each chain scores [0.1 * len(prompt)] + step lengths / 100, so a
    test can tell whose answer it got. `delay_s` holds every call; `fail` makes the next calls raise."""
    batch_size: int = 4
    delay_s: float = 0.0
    fail: int = 0
    calls: list = field(default_factory=list)  # chains per call
    batches: list = field(default_factory=list)  # the chains of each call
    gate: threading.Event | None = None  # when set, each call waits for it

    def __post_init__(self):
        self.metadata = SimpleNamespace(separator="\n\n", loss="bce", max_length=64)
        self.tokenizer = SimpleNamespace(eos_token="</s>", pad_token="</s>")
        self.device = SimpleNamespace(type="cpu")

    def __str__(self) -> str:
        return "fake"

    @staticmethod
    def expected(prompt: str, steps: list[str]) -> list[float]:
        return [len(prompt) / 10 + len(step) / 100 for step in steps]

    def score_many(self, chains):
        self.calls.append(len(chains))
        self.batches.append(list(chains))
        if self.gate is not None:
            self.gate.wait(timeout=30)
        time.sleep(self.delay_s)
        if self.fail:
            self.fail -= 1
            raise RuntimeError("CUDA out of memory (simulated)")
        return [self.expected(prompt, steps) for prompt, steps in chains]
