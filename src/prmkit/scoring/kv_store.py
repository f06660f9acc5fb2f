"""Keys and values kept across `score_many` calls, so each round of a tree search reads only its new steps.

A search round scores every child of every open beam: its parent's whole chain plus one new step. The round before
scored that parent, so the model has read its tokens already; kept, their keys and values let the child run only the
new step's tokens on top of them. A PRM is causal, so the keys, values and per-position head scores of a chain are
the first ones of every chain that begins with it: scores equal a full pass (to 1e-5 in fp32).

The store holds, per scored chain (keyed by its token ids), a `KeptChain`: every layer's keys and values, cut to the
chain's own tokens and copied out of the batch's tensors, and the head's score at each position, so that a step
ending inside the kept part is read rather than recomputed. A chain runs on from the longest stored chain its ids
begin with. The store is bounded in bytes and drops the least recently used chains first; a chain whose entry was
dropped is read as it would be without the store. Only plain full-attention layers (transformers' `DynamicLayer`)
can be kept: a sliding-window layer holds only its window, and other layer kinds hold state that a slice of tokens
does not describe, so such a model is scored as without the store.

Memory: a kept token costs layers x 2 x kv_heads x head_dim x bytes per value (SmolLM2-135M in fp32: 30 x 2 x 3 x
64 x 4 bytes = 45 KiB; Qwen2.5-Math-7B in bf16: 28 x 2 x 4 x 128 x 2 bytes = 56 KiB).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from prmkit.errors import PRMError
from prmkit.scoring.prefix import KeptChain

# What `PRMScorer.kept_caches` holds by default: about 46,000 tokens of SmolLM2-135M in fp32 or 37,000 of a 7B
# Qwen2.5 in bf16, a search round of 8 problems x 16 beams x 300 tokens (older rounds' chains are dropped first).
KEPT_CACHE_MB = 2048


def keeps_full_attention(model) -> bool:
    """Whether every layer of the model's cache holds all the tokens' keys and values (a plain DynamicLayer), so
    that a later pass can run on from any prefix of them."""
    return partial_cache_layers(model) is None


def partial_cache_layers(model) -> str | None:
    """None where every layer of the model's cache is a plain DynamicLayer; else the names of the other layer kinds
    it has (a sliding window keeps only its window, a linear-attention or convolution layer a running state that a
    slice of tokens does not describe, a hybrid layer both), which neither prefix reuse nor kept caches can run on
    from."""
    layers = DynamicCache(config=model.config).layers
    if not layers:  # layers made on first use: their kind is not known before a pass
        return "made on first use, of a kind its config does not say"
    others = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    return ", ".join(others) or None


class KVStore:
    """KeptChains by token ids, least recently used dropped first once they pass `max_mb` mebibytes."""

    def __init__(self, max_mb: float = KEPT_CACHE_MB):
        if not max_mb > 0:
            raise PRMError(f"max_mb={max_mb}; give the mebibytes of keys and values to keep, e.g. {KEPT_CACHE_MB}")
        self.max_bytes = int(max_mb * 2 ** 20)
        self.bytes = 0
        self.peak_bytes = 0
        self.dropped = 0  # chains evicted to stay within max_bytes, or too large to keep at all
        self._chains: OrderedDict[tuple[int, ...], KeptChain] = OrderedDict()
        self._lengths: Counter[int] = Counter()  # chains kept per token count: the lengths a lookup tries

    def __len__(self) -> int:
        return len(self._chains)

    def longest_prefix(self, ids: Sequence[int]) -> KeptChain | None:
        """The longest kept chain that `ids` begins with (`ids` itself included), marked as just used."""
        for length in sorted((n for n in self._lengths if n <= len(ids)), reverse=True):
            chain = self._chains.get(tuple(ids[:length]))
            if chain is not None:
                self._chains.move_to_end(chain.ids)
                return chain
        return None

    def add(self, chain: KeptChain) -> None:
        """Keep `chain` (replacing one with the same ids), then drop the least recently used until within budget.
        A chain larger than the whole budget is not kept."""
        if chain.ids in self._chains:
            self._remove(chain.ids)
        if chain.nbytes > self.max_bytes:
            self.dropped += 1
            return
        self._chains[chain.ids] = chain
        self._lengths[len(chain)] += 1
        self.bytes += chain.nbytes
        while self.bytes > self.max_bytes:
            self._remove(next(iter(self._chains)))
            self.dropped += 1
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def _remove(self, ids: tuple[int, ...]) -> None:
        chain = self._chains.pop(ids)
        self.bytes -= chain.nbytes
        self._lengths[len(ids)] -= 1
        if not self._lengths[len(ids)]:
            del self._lengths[len(ids)]
