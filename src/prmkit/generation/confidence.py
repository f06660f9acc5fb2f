"""The policy's own confidence in what it wrote: the log-probability of completion tokens after a prompt, under the
model's raw distribution (temperature 1, no top-p or top-k), by one teacher-forced forward pass per batch.

The mean log-prob per token of a sample is the baseline that every best-of-N table needs beside the PRM: a PRM
that picks the right sample no better than the policy's confidence has added nothing.

Memory stays bounded on long batches and large vocabularies: the backbone runs once per batch, and the LM head is
applied only to the positions that predict a completion token, `positions_per_chunk` of them at a time, so no
batch x sequence x vocabulary tensor is ever made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from prmkit.errors import PRMError

# Config fields of architectures that change the logits after the LM head (Gemma 2's soft cap, Cohere's and
# Granite's scales); applying the head alone would give another distribution than the model samples from.
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
NEUTRAL = (None, 1, 1.0)


@dataclass(frozen=True)
class CompletionLogprob:
    logprob: float  # the sum of the completion tokens' log-probs (0.0 for an empty completion)
    tokens: int  # how many completion tokens that sum covers
    # each completion token's log-prob in order: where in a sample the policy was unsure, e.g. per step
    token_logprobs: tuple[float, ...] = ()
    # each token's log-prob minus the most likely token's at its position (0 where the policy wrote its own first
    # choice): a slip the policy would not have made shows as a large gap, however hard the step was
    token_margins: tuple[float, ...] = ()

    @property
    def mean(self) -> float | None:
        """Log-prob per token, the length-fair confidence; None for an empty completion."""
        return self.logprob / self.tokens if self.tokens else None

    @property
    def lowest(self) -> float | None:
        """The least likely token's log-prob: one slip in an otherwise sure sample shows here and fades in the
        mean; None for an empty completion (or one computed without per-token values)."""
        return min(self.token_logprobs) if self.token_logprobs else None

    @property
    def widest_margin(self) -> float | None:
        """The largest gap between a written token and the policy's first choice at its position (the lowest
        margin, <= 0); None for an empty completion (or one computed without per-token values)."""
        return min(self.token_margins) if self.token_margins else None


def completion_logprobs(model, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], *,
                        batch_size: int = 8, positions_per_chunk: int = 1024,
                        padding_side: Literal["left", "right"] = "right") -> list[CompletionLogprob]:
    """For each (prompt, completion) pair of token ids, the sum of log p(completion token | everything before it),
    the number of completion tokens and each token's log-prob, in input order. `model` is a transformers causal
    LM; the forward runs on its device and in its dtype, without gradients. Pairs are batched `batch_size` at a
    time, longest first so a batch pads little. Where the padding goes does not change the result: positions follow
    the attention mask (`padding_side="left"` is the layout `generate` uses)."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions; give one completion "
                         "per prompt")
    if batch_size < 1 or positions_per_chunk < 1:
        raise ValueError(f"batch_size={batch_size}, positions_per_chunk={positions_per_chunk}; both must be >= 1")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side={padding_side!r}; use 'left' or 'right'")
    for index, prompt in enumerate(prompt_ids):
        if not len(prompt):
            raise ValueError(f"prompt {index} has no tokens; the first completion token needs a token before it "
                             "to be predicted from (a BOS token, at least)")
    _check_plain_head(model)
    results: list[CompletionLogprob | None] = [None] * len(prompt_ids)
    order = sorted(range(len(prompt_ids)), key=lambda i: -(len(prompt_ids[i]) + len(completion_ids[i])))
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        per_row = _batch_logprobs(model, [list(prompt_ids[i]) for i in rows],
                                  [list(completion_ids[i]) for i in rows], positions_per_chunk, padding_side)
        for i, (values, margins) in zip(rows, per_row):
            results[i] = CompletionLogprob(logprob=float(sum(values)), tokens=len(completion_ids[i]),
                                           token_logprobs=tuple(values), token_margins=tuple(margins))
    return results  # type: ignore[return-value]


def _check_plain_head(model) -> None:
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in LOGIT_TRANSFORMS:
        value = getattr(text_config, name, None)
        if value not in NEUTRAL:
            raise PRMError(f"{type(model).__name__} transforms its logits after the LM head ({name}={value}); "
                           "completion_logprobs applies the head alone and would report another distribution "
                           "than the one the model samples from, so it does not support this architecture")


@torch.inference_mode()
def _batch_logprobs(model, prompts: list[list[int]], completions: list[list[int]], positions_per_chunk: int,
                    padding_side: str) -> list[tuple[list[float], list[float]]]:
    """Per pair: each completion token's log-prob, and its margin below the most likely token there."""
    device = next(model.parameters()).device
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    width = max(lengths)
    input_ids = torch.zeros((len(prompts), width), dtype=torch.long)  # pad id 0: masked, never read
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    # (row, column of the position that predicts the token, the token) for every completion token
    rows, columns, targets = [], [], []
    for r, (prompt, completion) in enumerate(zip(prompts, completions)):
        offset = width - lengths[r] if padding_side == "left" else 0
        input_ids[r, offset:offset + lengths[r]] = torch.tensor(prompt + completion, dtype=torch.long)
        mask[r, offset:offset + lengths[r]] = 1
        first = offset + len(prompt)  # the column of the first completion token
        rows += [r] * len(completion)
        columns += range(first - 1, first - 1 + len(completion))
        targets += completion
    if not targets:
        return [([], []) for _ in prompts]
    # Positions count real tokens only, so a left-padded row sees the same positions as the row alone.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    hidden = model.base_model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                              position_ids=positions.to(device), use_cache=False).last_hidden_state
    head = model.get_output_embeddings()
    rows_t, columns_t = torch.tensor(rows, device=device), torch.tensor(columns, device=device)
    targets_t = torch.tensor(targets, device=device)
    token_logprobs, token_margins = [], []
    for start in range(0, len(targets), positions_per_chunk):
        piece = slice(start, start + positions_per_chunk)
        logprobs = torch.log_softmax(head(hidden[rows_t[piece], columns_t[piece]]).float(), dim=-1)
        written = logprobs.gather(-1, targets_t[piece, None]).squeeze(-1)
        token_logprobs.append(written)
        token_margins.append(written - logprobs.max(dim=-1).values)
    # the targets run row by row, each row's completion in order; float64, so that a row's sum does not depend on
    # how the batch was cut
    sizes = [len(c) for c in completions]
    per_token = torch.cat(token_logprobs).double().cpu().split(sizes)
    per_margin = torch.cat(token_margins).double().cpu().split(sizes)
    return [(values.tolist(), margins.tolist()) for values, margins in zip(per_token, per_margin)]
