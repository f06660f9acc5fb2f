"""Chains that begin with the same tokens read them once.

A PRM is causal: the hidden state of a token, and so a step's score, depends only on the tokens before it. N chains
with one prompt (a best-of-N group, a GRPO group of G completions) need the prompt's keys and values once, not N
times; the children of one beam in a tree search share the prompt and every step of their parent. The shared tokens
run in one forward pass (`read_prefix`) that gives their keys and values and the scores of the steps that end inside
them (a `KeptChain`); each batch of the chains' remaining tokens then runs after it (`forward_after`), its keys and
values widened to the batch. Scores equal a full pass (the same arithmetic on the same inputs, up to the order of
floating-point sums in attention). The same pass runs chains after keys and values kept from an earlier call
(`prmkit.scoring.kv_store`): every row of a batch may start from a KeptChain of its own.

Chains with one prompt are sorted by their tokens, so chains with a long common prefix sit together, and cut into
clusters greedily: a chain joins the current cluster while the tokens the cluster saves do not drop (k chains sharing
s tokens save (k - 1) x s), so the children of two beams form two clusters, each sharing its parent's whole prefix,
rather than one that shares only the prompt. Every chain keeps at least its last token out of the prefix. A chain
alone, or a cluster that shares fewer than MIN_SHARED_TOKENS tokens, takes the ordinary path and costs what it did.

Running on from a prefix needs every layer of the model's cache to hold all its tokens' keys and values (plain full
attention); the scorer reads every chain of any other model whole (`prmkit.scoring.kv_store.partial_cache_layers`).
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


@dataclass
class KeptChain:
    """A chain as the model has read it: its token ids, each layer's keys and values ([1, kv heads, tokens, head
    dim], on the model's device) and the head's score at every position (on the CPU). Any chain that begins with
    these ids can run on from here: its first tokens' keys, values and scores are these."""

    ids: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    scores: torch.Tensor

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        tensors = [*self.keys, *self.values, self.scores]
        return sum(t.numel() * t.element_size() for t in tensors)


HeadScores = Callable[[object], torch.Tensor]  # a model output -> the head's scores [rows, tokens], on the CPU


def read_prefix(model, ids: Sequence[int], device, head_scores: HeadScores,
                start: KeptChain | None = None) -> KeptChain:
    """The chain `ids` read by the model, in one pass; from `start` (a kept chain that `ids` begins with), only
    the tokens after it run, and none when it is `ids` itself."""
    if start is not None and len(start) == len(ids):
        return start
    if start is None:
        cache = DynamicCache(config=model.config)
        output = model(input_ids=torch.tensor([list(ids)], device=device), use_cache=True,
                       **{cache_argument(model): cache})
        return KeptChain(tuple(ids), [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers],
                         head_scores(output)[0])
    output, cache, width = forward_after(model, [start], [ids[len(start):]], 0, device)
    return kept_row(cache, 0, width - len(start), width + len(ids) - len(start), ids,
                    torch.cat([start.scores, head_scores(output)[0]]))


def forward_after(model, starts: Sequence[KeptChain], continuations: Sequence[Sequence[int]], pad_id: int, device):
    """The model's output for each continuation read after its start (rows may share one), in one batch; the
    cache that pass filled; and `width`, the slots before the continuations. Each row's start is right-aligned to
    the longest (the gap before a shorter one is masked), so a row's start and continuation are one run of slots,
    and its positions go on from its own start's length. A row's padding after a short continuation repeats its
    last real position: counted on, a long start's padding would pass the position table of a GPT-2-style model
    (every chain fitting it) and raise the largest position, which dynamic and longrope RoPE scaling read, so
    padding would change the real tokens' scores."""
    width = max(len(start) for start in starts)
    tokens = max(len(c) for c in continuations)
    ids = torch.full((len(starts), tokens), pad_id, dtype=torch.long)
    mask = torch.zeros((len(starts), width + tokens), dtype=torch.long)
    positions = torch.empty((len(starts), tokens), dtype=torch.long)
    for row, (start, continuation) in enumerate(zip(starts, continuations)):
        ids[row, :len(continuation)] = torch.tensor(list(continuation))
        mask[row, width - len(start):width + len(continuation)] = 1
        positions[row] = torch.arange(len(start), len(start) + tokens).clamp(max=len(start) + len(continuation) - 1)
    cache = batch_cache(model, starts, width)  # the forward pass appends to it
    output = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                   use_cache=True, **{cache_argument(model): cache})
    return output, cache, width


def batch_cache(model, starts: Sequence[KeptChain], width: int) -> DynamicCache:
    """A cache with one row per start, each right-aligned in `width` slots (zeros before a shorter one)."""
    cache = DynamicCache(config=model.config)
    for index, layer in enumerate(cache.layers):
        layer.update(_rows([s.keys[index] for s in starts], width), _rows([s.values[index] for s in starts], width))
    return cache


def _rows(tensors: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """One layer's keys (or values) of every start as one batch tensor, each right-aligned in `width` slots."""
    if all(t is tensors[0] for t in tensors) and tensors[0].shape[-2] == width:
        return tensors[0].expand(len(tensors), -1, -1, -1)  # one shared start: the cache's update copies it per row
    first = tensors[0]
    out = first.new_zeros((len(tensors), first.shape[1], width, first.shape[3]))
    for row, tensor in enumerate(tensors):
        out[row, :, width - tensor.shape[-2]:] = tensor[0]
    return out


def kept_row(cache: DynamicCache, row: int, begin: int, end: int, ids: Sequence[int],
             scores: torch.Tensor) -> KeptChain:
    """Slots begin:end of one row of a filled cache as a KeptChain, copied out so that the batch's tensors are not
    kept alive by it."""
    return KeptChain(tuple(ids), [layer.keys[row:row + 1, :, begin:end].clone() for layer in cache.layers],
                     [layer.values[row:row + 1, :, begin:end].clone() for layer in cache.layers], scores)


def cache_argument(model) -> str:
    """transformers renamed the forward argument from past_key_values to cache (the old name is deprecated)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
