"""Tiny random PRMs saved in the public formats prmkit reads (Qwen2.5-Math-PRM, Math-Shepherd, RLHFlow): the same
config fields, weight names and tokenizer special tokens as the released models, at hidden size 32."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tiny_models import build_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2Model

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=512)
# Chains every format is scored on: steps of several lengths, a right and a wrong answer.
CHAINS = [
    ("Tom has 3 apples and buys 12 more. How many apples?", ["3 + 12 = 15.", "He has 15 apples.", "The answer is 15."]),
    ("She sells 4 boxes of 6 pens. How many pens?", ["4 * 6 = 24 pens.", "The answer is 24."]),
    ("A rectangle is 3 by 8. What is its area?", ["Its area is 3 * 8 = 24.", "Step 1: 7 - 2 = 5.",
                                                  "Each friend gets 20 / 4 = 5 cookies.", "The answer is 42."]),
]
# The released tokenizers' chat templates, cut to what these formats use (ChatML for Qwen, Llama 3's headers).
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def _tokenizer(special: list[str], chat_template: str | None):
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": special})
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


def _common(tokenizer) -> dict:
    return dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)


def build_qwen_prm(folder: str | Path, seed: int = 0):
    """A Qwen2ForProcessRewardModel folder: config with its architectures and auto_map (pointing at remote code
    that is not there, so loading must not need it), `model.*` + `score.{0,2}.*` safetensors weights, and a ChatML
    tokenizer with `<extra_0>`. Returns (folder, backbone, head) for computing scores by hand."""
    folder = Path(folder)
    tokenizer = _tokenizer(["<|im_start|>", "<|im_end|>", "<extra_0>"], CHATML)
    config = Qwen2Config(**SMALL, **_common(tokenizer))
    torch.manual_seed(seed)
    backbone = Qwen2Model(config).eval()
    head = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).eval()
    state = {f"model.{k}": v.contiguous() for k, v in backbone.state_dict().items()}
    state.update({f"score.{k}": v.contiguous() for k, v in head.state_dict().items()})
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    raw = config.to_dict()
    raw.update(architectures=["Qwen2ForProcessRewardModel"],
               auto_map={"AutoConfig": "configuration_qwen2_rm.Qwen2RMConfig",
                         "AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"})
    (folder / "config.json").write_text(json.dumps(raw, indent=2), encoding="utf-8")
    tokenizer.save_pretrained(folder)
    return folder, backbone, head


def build_causal_prm(folder: str | Path, style: str, seed: int = 0, tied: bool = False):
    """A causal-LM PRM: `math-shepherd` (a Mistral with "ки" as an added token, no chat template, as the released
    base-model tokenizer) or `rlhflow` (a Llama with Llama 3's chat template). Returns (folder, model)."""
    folder = Path(folder)
    if style == "math-shepherd":
        tokenizer = _tokenizer(["ки"], None)
        config = MistralConfig(**SMALL, **_common(tokenizer), tie_word_embeddings=tied)
        cls = MistralForCausalLM
    else:
        tokenizer = _tokenizer(["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], LLAMA3)
        config = LlamaConfig(**SMALL, **_common(tokenizer), tie_word_embeddings=tied)
        cls = LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model
