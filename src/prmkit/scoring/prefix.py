"""Chains that begin with the same tokens read them once.

A PRM is causal: the hidden state of a token depends only on the tokens before it, so N chains with one prompt (a
best-of-N group, a GRPO group of G completions) need the prompt's keys and values once, not N times. The shared
tokens run in one forward pass that fills a key/value cache; each batch of the chains' remaining tokens then runs on
a copy of that cache, widened to the batch. Scores equal a full pass (the same arithmetic on the same inputs, up to
the order of floating-point sums in attention).

The shared part is the longest common token prefix of the chains with the same prompt, stopped before the first
scored position (every step's score is then read from a continuation pass). A chain alone with its prompt, or a
group that shares fewer than MIN_SHARED_TOKENS tokens, takes the ordinary path and costs what it did before.
"""

from __future__ import annotations

import copy
import inspect
from collections import defaultdict
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from prmkit.tokenize import TokenizedChain

# Under this many shared tokens the saving is smaller than the extra forward pass of the prefix costs.
MIN_SHARED_TOKENS = 16


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def shared_prefix_groups(tokenized: Sequence[TokenizedChain], indices: Sequence[int], prompts: Sequence[str],
                         min_shared: int = MIN_SHARED_TOKENS) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """(shared token count, chain indices) for each group of two or more chains with one prompt that share at
    least `min_shared` tokens before their first scored position, and the indices left for the ordinary path."""
    by_prompt: dict[str, list[int]] = defaultdict(list)
    for index in indices:
        by_prompt[prompts[index]].append(index)
    groups, rest = [], []
    for members in by_prompt.values():
        first = tokenized[members[0]].input_ids
        shared = min(min(common_prefix(first, tokenized[m].input_ids), tokenized[m].step_positions[0])
                     for m in members)
        if len(members) < 2 or shared < min_shared:
            rest.extend(members)
        else:
            groups.append((shared, members))
    return groups, rest


class PrefixCache:
    """The key/value cache of one shared prefix, and forward passes of continuations on copies of it."""

    def __init__(self, model, prefix_ids: Sequence[int], device):
        self.model = model
        self.device = device
        self.length = len(prefix_ids)
        # transformers renamed the forward argument from past_key_values to cache (the old name is deprecated)
        self.cache_argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.cache = DynamicCache(config=model.config)
        model(input_ids=torch.tensor([list(prefix_ids)], device=device), use_cache=True,
              **{self.cache_argument: self.cache})

    def forward(self, continuations: Sequence[Sequence[int]], pad_id: int):
        """The model's output for the continuations (right-padded to the longest), each read after the prefix."""
        width = max(len(c) for c in continuations)
        ids = torch.full((len(continuations), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(continuations), self.length + width), dtype=torch.long)
        mask[:, :self.length] = 1
        for row, tokens in enumerate(continuations):
            ids[row, :len(tokens)] = torch.tensor(list(tokens))
            mask[row, self.length:self.length + len(tokens)] = 1
        cache = copy.deepcopy(self.cache)  # the forward pass appends to the cache it is given
        cache.batch_repeat_interleave(len(continuations))
        positions = torch.arange(self.length, self.length + width, device=self.device).expand(len(continuations), -1)
        return self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), position_ids=positions,
                          use_cache=True, **{self.cache_argument: cache})
