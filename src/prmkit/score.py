"""Score chains with a trained PRM: every step of a chain in one forward pass, many chains per batch.

Inputs go through `tokenize_chain`, the function training used, so a chain scores the same here as in training's
evaluation. Chains are sorted by length before batching so padding stays small, each batch is padded once, and
the model has no LM head, so no vocabulary-sized logits are computed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence, Union

import torch

from prmkit.errors import PRMError
from prmkit.loss import scores_from_head
from prmkit.model import PRMMetadata, load_prm
from prmkit.precision import available_device, bf16_supported
from prmkit.tokenize import StepCollator, TokenizedChain, tokenize_chain

AGGREGATIONS = {
    "min": min,
    "max": max,
    "mean": lambda xs: sum(xs) / len(xs),
    "last": lambda xs: xs[-1],
    "prod": math.prod,
    "geometric_mean": lambda xs: math.prod(xs) ** (1.0 / len(xs)),
}
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}

Separator = Union[str, "re.Pattern[str]", None]
Candidate = Union[str, Sequence[str]]


def aggregate(scores: Sequence[float | None], how: str = "min") -> float | None:
    """One number for a chain from its step scores (steps dropped by truncation are left out)."""
    if how not in AGGREGATIONS:
        raise PRMError(f"unknown aggregation {how!r}; use one of {', '.join(AGGREGATIONS)}")
    kept = [s for s in scores if s is not None]
    if how == "geometric_mean" and any(s < 0 for s in kept):
        return None  # an MSE head can go below 0, where a geometric mean has no meaning
    return AGGREGATIONS[how](kept) if kept else None


def split_steps(text: str, separator: Separator) -> list[str]:
    """Cut a raw completion into steps: at a literal separator string, or at every match of a compiled regex.
    Pieces are stripped and empty ones dropped, so "a\\n\\n\\nb\\n\\n" gives ["a", "b"], as training steps were
    written; no separator (or "") keeps the whole text as one step."""
    if isinstance(separator, re.Pattern):
        pieces = separator.split(text)
    elif separator:
        pieces = text.split(separator)
    else:
        pieces = [text]
    return [piece.strip() for piece in pieces if piece and piece.strip()]


def prompt_text(value) -> str:
    """The problem text of a prompt: a string, or a chat message list ([{"role", "content"}, ...]) whose last
    user message is the problem (system messages and earlier turns are not what the PRM was trained on)."""
    messages = _messages(value)
    if messages is None:
        return value
    if not messages:
        return ""
    users = [m for m in messages if m.get("role") == "user"]
    return _content_text((users or messages)[-1].get("content"))


def completion_text(value) -> str:
    """The text of a completion: a string, or chat messages whose assistant contents are joined."""
    messages = _messages(value)
    if messages is None:
        return value
    assistants = [m for m in messages if m.get("role") == "assistant"] or messages
    return "\n\n".join(_content_text(m.get("content")) for m in assistants)


def _messages(value) -> list[dict] | None:
    if isinstance(value, str):
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(m, dict) for m in value):
        raise PRMError(f"expected a string or a list of {{'role', 'content'}} messages, got {_short(value)}")
    return list(value)


def _content_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """cuda > mps > cpu when not given; a named device that is not there is an error, not a silent fallback."""
    chosen = torch.device(device or available_device())
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise PRMError(f"device={device!r} but no CUDA GPU is visible; use device='cpu' or leave it unset")
    if chosen.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise PRMError(f"device={device!r} but MPS is not available; use device='cpu' or leave it unset")
    return chosen


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Inference weights: bf16 on a GPU that supports it (fp16 otherwise), fp32 on CPU, where half-precision
    matmuls are many times slower. No optimizer state here, so low-precision weights lose nothing."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.type == "cpu":
            return torch.float32
        return torch.bfloat16 if bf16_supported(device.type) else torch.float16
    if dtype not in DTYPES:
        raise PRMError(f"dtype={dtype!r} is not known; use auto, fp32, bf16 or fp16")
    return DTYPES[dtype]


@dataclass
class RankedCandidate:
    rank: int  # 0 = best
    index: int  # position in the input list
    steps: list[str]
    step_scores: list[float | None]
    score: float | None  # the aggregate; None when no step was scored
    text: str | None = None  # the raw completion, when the candidate was given as one string


def rank_candidates(step_scores: Sequence[Sequence[float | None]], how: str = "min", *,
                    steps: Sequence[Sequence[str]] | None = None,
                    texts: Sequence[str | None] | None = None) -> list[RankedCandidate]:
    """Candidates best first by aggregate score; unscored ones last; ties keep input order."""
    scores = [aggregate(s, how) for s in step_scores]
    order = sorted(range(len(scores)), key=lambda i: (scores[i] is None, -(scores[i] or 0.0), i))
    return [RankedCandidate(rank=rank, index=i, steps=list(steps[i]) if steps else [],
                            step_scores=list(step_scores[i]), score=scores[i], text=texts[i] if texts else None)
            for rank, i in enumerate(order)]


class PRMScorer:
    """A loaded PRM that scores steps. `PRMScorer.from_pretrained(folder)` takes a run folder, any checkpoint in
    it (LoRA adapter or full weights) or a merged export."""

    def __init__(self, model, tokenizer, metadata: PRMMetadata, *, device: str | None = None,
                 dtype: str | torch.dtype | None = None, batch_size: int = 16, max_batch_tokens: int | None = None):
        if batch_size < 1:
            raise PRMError(f"batch_size={batch_size}; use a positive number of chains per batch")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise PRMError(f"max_batch_tokens={max_batch_tokens}; use a positive number of tokens, or None")
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, device: str | None = None, dtype: str | torch.dtype | None = None,
                        batch_size: int = 16, max_batch_tokens: int | None = None, trust_remote_code: bool = False,
                        allow_pickle: bool = False, merge_adapter: bool = True,
                        max_length: int | None = None) -> "PRMScorer":
        """Load for inference. A LoRA adapter is merged into the weights (in fp32, before any cast), which gives
        the same scores with no adapter overhead per layer. `max_length` replaces the training length, to read
        longer chains than the PRM was trained on (the backbone's own context is the hard limit). `batch_size`
        caps the chains per forward pass and `max_batch_tokens` the padded tokens (chains x longest chain), so a
        batch of long chains stays within device memory. `allow_pickle` as in the training config."""
        model, tokenizer, metadata = load_prm(folder, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
        if max_length is not None:
            if max_length < 8:
                raise PRMError(f"max_length={max_length}; use at least 8 tokens (training used "
                               f"{metadata.max_length})")
            metadata = replace(metadata, max_length=max_length)
        if merge_adapter and hasattr(model, "merge_and_unload"):
            model = model.merge_and_unload()
        return cls(model, tokenizer, metadata, device=device, dtype=dtype, batch_size=batch_size,
                   max_batch_tokens=max_batch_tokens)

    def tokenize(self, prompt: str, steps: Sequence[str]) -> TokenizedChain:
        return tokenize_chain(self.tokenizer, prompt, steps, None, separator=self.metadata.separator,
                              max_length=self.metadata.max_length)

    def split_steps(self, text: str, separator: Separator = None) -> list[str]:
        """Steps of a raw completion, cut at the run's separator unless another string or regex is given."""
        return split_steps(text, self.metadata.separator if separator is None else separator)

    def score(self, prompt: str, steps: Sequence[str]) -> list[float | None]:
        """One score per step; None for a step that max_length cut off."""
        return self.score_many([(prompt, steps)])[0]

    def score_text(self, prompt: str, completion: str, separator: Separator = None) -> list[float | None]:
        """Scores for the steps of a raw completion (see `split_steps`)."""
        return self.score(prompt, self.split_steps(completion, separator))

    def best_of_n(self, prompt: str, candidates: Sequence[Candidate], aggregate: str = "min",
                  separator: Separator = None) -> list[RankedCandidate]:
        """Candidates (raw strings or step lists) ranked best first by their aggregate step score."""
        steps = [self.split_steps(c, separator) if isinstance(c, str) else list(c) for c in candidates]
        scores = self.score_many([(prompt, s) for s in steps])
        return rank_candidates(scores, aggregate, steps=steps,
                               texts=[c if isinstance(c, str) else None for c in candidates])

    @torch.inference_mode()
    def score_many(self, chains: Sequence[tuple[str, Sequence[str]]]) -> list[list[float | None]]:
        """Scores for many (prompt, steps) chains, in input order; batches are formed by length."""
        tokenized = [self.tokenize(prompt, steps) for prompt, steps in chains]
        results: list[list[float | None]] = [[None] * chain.steps_dropped for chain in tokenized]
        scorable = [i for i in range(len(tokenized)) if tokenized[i].step_positions]  # else no step fits
        collate = StepCollator(self.tokenizer.pad_token_id)
        for indices in self._batches(sorted(scorable, key=lambda i: len(tokenized[i].input_ids)), tokenized):
            batch = [tokenized[i] for i in indices]
            inputs = collate([{"input_ids": chain.input_ids} for chain in batch])  # the training collator's padding
            head = self.model(input_ids=inputs["input_ids"].to(self.device),
                              attention_mask=inputs["attention_mask"].to(self.device)).logits.squeeze(-1)
            scores = scores_from_head(self.metadata.loss, head).cpu()
            for row, index in enumerate(indices):
                chain = batch[row]
                results[index] = scores[row, chain.step_positions].tolist() + [None] * chain.steps_dropped
        return results

    def _batches(self, order: list[int], tokenized: list[TokenizedChain]):
        """Consecutive runs of the length-sorted chains: at most batch_size chains, and at most max_batch_tokens
        padded tokens (a chain longer than the budget on its own still gets a batch of one)."""
        batch: list[int] = []
        for index in order:
            length = len(tokenized[index].input_ids)  # the longest so far, as the order is ascending
            over_budget = self.max_batch_tokens is not None and (len(batch) + 1) * length > self.max_batch_tokens
            if batch and (len(batch) == self.batch_size or over_budget):
                yield batch
                batch = []
            batch.append(index)
        if batch:
            yield batch


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
