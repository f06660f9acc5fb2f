"""Chains that begin with the same tokens read them once.

A PRM is causal: the hidden state of a token, and so a step's score, depends only on the tokens before it. N chains
with one prompt (a best-of-N group, a GRPO group of G completions) need the prompt's keys and values once, not N
times; the children of one beam in a tree search share the prompt and every step of their parent. The shared tokens
run in one forward pass that fills a key/value cache and gives the scores of the steps that end inside them; each
batch of the chains' remaining tokens then runs on a copy of that cache, widened to the batch. Scores equal a full
pass (the same arithmetic on the same inputs, up to the order of floating-point sums in attention).

Chains with one prompt are sorted by their tokens, so chains with a long common prefix sit together, and cut into
clusters greedily: a chain joins the current cluster while the tokens the cluster saves do not drop (k chains sharing
s tokens save (k - 1) x s), so the children of two beams form two clusters, each sharing its parent's whole prefix,
rather than one that shares only the prompt. Every chain keeps at least its last token out of the prefix. A chain
alone, or a cluster that shares fewer than MIN_SHARED_TOKENS tokens, takes the ordinary path and costs what it did.
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
    """(shared token count, chain indices) for each cluster of two or more chains with one prompt that share at
    least `min_shared` tokens, and the indices left for the ordinary path."""
    by_prompt: dict[str, list[int]] = defaultdict(list)
    for index in indices:
        by_prompt[prompts[index]].append(index)
    groups, rest = [], []
    for members in by_prompt.values():
        members = sorted(members, key=lambda i: tokenized[i].input_ids)
        clusters: list[tuple[int, list[int]]] = []
        shared, cluster = 0, []
        for index in members:
            ids = tokenized[index].input_ids
            if cluster:
                # the prefix must leave each chain at least one token to run after it
                joined = min(shared, common_prefix(tokenized[cluster[0]].input_ids, ids), len(ids) - 1)
                if len(cluster) * joined >= (len(cluster) - 1) * shared:
                    shared = joined
                    cluster.append(index)
                    continue
                clusters.append((shared, cluster))
            shared, cluster = len(ids) - 1, [index]
        clusters.append((shared, cluster))
        for shared, cluster in clusters:
            if len(cluster) < 2 or shared < min_shared:
                rest.extend(cluster)
            else:
                groups.append((shared, cluster))
    return groups, rest


class PrefixCache:
    """The key/value cache of one shared prefix, its own output, and forward passes of continuations on copies of
    the cache."""

    def __init__(self, model, prefix_ids: Sequence[int], device):
        self.model = model
        self.device = device
        self.length = len(prefix_ids)
        # transformers renamed the forward argument from past_key_values to cache (the old name is deprecated)
        self.cache_argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.cache = DynamicCache(config=model.config)
        self.output = model(input_ids=torch.tensor([list(prefix_ids)], device=device), use_cache=True,
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
