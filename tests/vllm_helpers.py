"""Running a script inside the vLLM environment (.venv-vllm, made by scripts/setup_vllm.sh), and a tiny model vLLM's
CPU attention accepts. The tests that need vLLM are skipped, with the reason, when that environment is absent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from side_envs import run_side_script  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SCRIPTS = Path(__file__).parent / "vllm_scripts"
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.is_file(),
                                reason="no vLLM environment (.venv-vllm); create it with scripts/setup_vllm.sh")
# vLLM on CPU reserves this share of the node's memory; its default (0.9) asks for more than a shared machine has.
CPU_MEMORY_SHARE = 0.15


def run_in_vllm(script: str, payload: dict, timeout: float = 600) -> dict:
    """Run tests/vllm_scripts/SCRIPT in the vLLM environment with `payload` as JSON on stdin; returns the JSON
    object the script prints last (vLLM logs to stderr)."""
    return run_side_script(VLLM_PYTHON, SCRIPTS / script, payload, timeout)


def build_vllm_sized_llama(folder: Path, seed: int = 0) -> Path:
    """A tiny random Llama with head_dim 32, the smallest head size vLLM's CPU attention runs (the shared tiny
    models have head_dim 8), and the tests' local tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, max_position_embeddings=512, vocab_size=len(tokenizer),
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
