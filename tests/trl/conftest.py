"""Fixtures of the TRL drop-in tests: a tiny Qwen2 folder (TRL's documented example uses Qwen2, and its default
max_length of 1024 needs a context at least that long), TRL-layout rows (bool labels), and prmkit's cache in a
temporary folder, where the drop-in writes starting models and rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_models import build_tokenizer
from transformers import AutoModelForCausalLM, Qwen2Config


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-qwen2-2k")
    tokenizer = build_tokenizer()
    config = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=2048, vocab_size=len(tokenizer),
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def stepwise_rows(n: int, seed: int = 3) -> list[dict]:
    """Rows as TRL's stepwise-supervision datasets hold them: a prompt, its steps, one bool per step."""
    from prmkit.data.synthetic import generate_records

    return [{"prompt": r["prompt"], "completions": r["completions"], "labels": [bool(x) for x in r["labels"]]}
            for r in generate_records(n, seed=seed)]


@pytest.fixture(scope="session")
def rows():
    """`rows(n, seed=3)`: a Dataset of n TRL-layout rows."""
    from datasets import Dataset

    return lambda n, seed=3: Dataset.from_list(stepwise_rows(n, seed))


@pytest.fixture(autouse=True)
def prmkit_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path / "prmkit-cache"))
    return tmp_path / "prmkit-cache"
