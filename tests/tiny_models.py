"""Tiny models and a tokenizer built locally from a config, so tests never download anything."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, PreTrainedTokenizerFast, Qwen2Config

CORPUS = [
    "Tom has 3 apples and buys 12 more, so he has 3 + 12 = 15 apples.",
    "She sells 4 boxes of 6 pens, so she sells 4 * 6 = 24 pens.",
    "The answer is 42.", "Step 1: 7 - 2 = 5.", "Each friend gets 20 / 4 = 5 cookies.",
    "A rectangle is 3 by 8, so its area is 3 * 8 = 24.", "What is the total cost?\n\n",
    "0 1 2 3 4 5 6 7 8 9 10 100 + - * / = . , ? ! ки",
]


def build_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def build_tiny_model(folder: str | Path, arch: str = "llama", seed: int = 0) -> Path:
    """Save a randomly initialised tiny causal LM + tokenizer to `folder` and return it."""
    folder = Path(folder)
    tokenizer = build_tokenizer()
    common = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
    if arch == "llama":
        config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=512, **common)
    elif arch == "qwen2":
        config = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=512, **common)
    elif arch == "gpt2":
        config = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=512, **common)
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train_tiny_run(base: str | Path, root: Path, *overrides: str) -> Path:
    """A tiny LoRA PRM run (2 optimizer steps on 16 synthetic records) on `base`, trained into root/run."""
    from prmkit.config import load_config
    from prmkit.data.synthetic import generate_records
    from prmkit.files import write_jsonl
    from prmkit.training.trainer import train

    write_jsonl(generate_records(16, seed=3), root / "train.jsonl")
    train(load_config(None, [
        f"model.base={base}", f"data.train={root / 'train.jsonl'}", "data.max_length=160", f"output_dir={root}",
        "run_name=run", "training.max_steps=2", "training.batch_size=4", "training.logging_steps=1",
        "training.lr=5e-3", "lora.r=4", "lora.dropout=0.0", *overrides]))
    return root / "run"
