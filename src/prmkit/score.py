"""Score chains with a trained PRM: every step of a chain in one forward pass, many chains per batch.

Inputs go through `tokenize_chain`, the function training used, so a chain scores the same here as in training's
evaluation. Chains are sorted by length before batching so padding stays small.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch

from prmkit.loss import scores_from_head
from prmkit.model import PRMMetadata, load_prm
from prmkit.precision import available_device
from prmkit.tokenize import TokenizedChain, tokenize_chain

AGGREGATIONS = {
    "min": min,
    "max": max,
    "mean": lambda xs: sum(xs) / len(xs),
    "last": lambda xs: xs[-1],
    "prod": math.prod,
    "geometric_mean": lambda xs: math.prod(xs) ** (1.0 / len(xs)),
}


def aggregate(scores: Sequence[float | None], how: str = "min") -> float | None:
    """One number for a chain from its step scores (steps dropped by truncation are left out)."""
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}; use one of {', '.join(AGGREGATIONS)}")
    kept = [s for s in scores if s is not None]
    return AGGREGATIONS[how](kept) if kept else None


class PRMScorer:
    def __init__(self, model, tokenizer, metadata: PRMMetadata, *, device: str | None = None, batch_size: int = 16):
        self.device = torch.device(device or available_device())
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, device: str | None = None, batch_size: int = 16,
                        trust_remote_code: bool = False) -> "PRMScorer":
        model, tokenizer, metadata = load_prm(folder, trust_remote_code=trust_remote_code)
        return cls(model, tokenizer, metadata, device=device, batch_size=batch_size)

    def tokenize(self, prompt: str, steps: Sequence[str]) -> TokenizedChain:
        return tokenize_chain(self.tokenizer, prompt, steps, None, separator=self.metadata.separator,
                              max_length=self.metadata.max_length)

    def score(self, prompt: str, steps: Sequence[str]) -> list[float | None]:
        """One score per step; None for a step that max_length cut off."""
        return self.score_many([(prompt, steps)])[0]

    @torch.inference_mode()
    def score_many(self, chains: Sequence[tuple[str, Sequence[str]]]) -> list[list[float | None]]:
        tokenized = [self.tokenize(prompt, steps) for prompt, steps in chains]
        order = sorted(range(len(tokenized)), key=lambda i: len(tokenized[i].input_ids))
        results: list[list[float | None]] = [[] for _ in chains]
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            batch = [tokenized[i] for i in order[start:start + self.batch_size]]
            length = max(len(c.input_ids) for c in batch)
            input_ids = torch.full((len(batch), length), pad, dtype=torch.long)
            attention_mask = torch.zeros((len(batch), length), dtype=torch.long)
            for row, chain in enumerate(batch):
                input_ids[row, :len(chain.input_ids)] = torch.tensor(chain.input_ids)
                attention_mask[row, :len(chain.input_ids)] = 1
            head = self.model(input_ids=input_ids.to(self.device),
                              attention_mask=attention_mask.to(self.device)).logits.squeeze(-1)
            scores = scores_from_head(self.metadata.loss, head).cpu()
            for row, index in enumerate(order[start:start + self.batch_size]):
                chain = batch[row]
                step_scores = scores[row, chain.step_positions].tolist()
                results[index] = step_scores + [None] * chain.steps_dropped
        return results
