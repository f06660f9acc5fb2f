"""Shared fixtures: tiny models and a tokenizer built locally, and one trained tiny run for every test that needs
a run folder. Nothing here downloads: the hub is switched off before transformers is imported."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # a test that tried to reach the hub fails at once instead of waiting on the network
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

from tiny_models import build_tiny_model, build_tokenizer, train_tiny_run  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items):
    """Everything under tests/e2e is `slow` (whole training runs, subprocesses): `-m "not slow"` leaves it out while
    working on a module; the README's test command and CI run it."""
    for item in items:
        if E2E in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-gpt2"), "gpt2")


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def tiny_run(tiny_llama, tmp_path_factory) -> Path:
    """One tiny LoRA run (2 optimizer steps, a checkpoint at each), trained once per session and shared by the
    scoring, reward, evaluation, serving and distributed tests. Tests read it; none writes into it except
    `prmkit eval`'s default output folder (RUN/eval/...)."""
    return train_tiny_run(tiny_llama, tmp_path_factory.mktemp("tiny-run"), "training.save_steps=1")


@pytest.fixture(scope="session")
def tiny_gpt2_run(tiny_gpt2, tmp_path_factory) -> Path:
    """The same tiny LoRA run on the GPT-2-style model (learned positions, another attention and cache layout),
    for the scoring tests that must hold on both architectures. Read only."""
    return train_tiny_run(tiny_gpt2, tmp_path_factory.mktemp("tiny-gpt2-run"))


@pytest.fixture
def samples_drawn_without_logprobs(monkeypatch) -> list:
    """Every Sample the transformers backend draws while the test runs, with the log-prob forward forbidden: a
    command that asks for log-probs it never reads fails at once."""
    import prmkit.generation.hf as hf

    def forbidden(*args, **kwargs):
        raise AssertionError("completion_logprobs ran for a command that never reads a log-prob")

    drawn: list = []
    real_generate = hf.TransformersGenerator.generate

    def recording(self, *args, **kwargs):
        groups = real_generate(self, *args, **kwargs)
        drawn.extend(s for group in groups for s in group)
        return groups

    monkeypatch.setattr(hf, "completion_logprobs", forbidden)
    monkeypatch.setattr(hf.TransformersGenerator, "generate", recording)
    return drawn
