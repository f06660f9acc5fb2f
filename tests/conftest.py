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

from tiny_models import build_tiny_model, build_tokenizer  # noqa: E402

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
    from prmkit.config import load_config
    from prmkit.data.synthetic import generate_records
    from prmkit.files import write_jsonl
    from prmkit.training.trainer import train

    root = tmp_path_factory.mktemp("tiny-run")
    write_jsonl(generate_records(16, seed=3), root / "train.jsonl")
    train(load_config(None, [
        f"model.base={tiny_llama}", f"data.train={root / 'train.jsonl'}", "data.max_length=160",
        f"output_dir={root}", "run_name=run", "training.max_steps=2", "training.batch_size=4",
        "training.save_steps=1", "training.logging_steps=1", "training.lr=5e-3", "lora.r=4",
        "lora.dropout=0.0"]))
    return root / "run"
