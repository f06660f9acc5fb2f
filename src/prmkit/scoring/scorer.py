"""Score chains with a trained PRM: every step of a chain in one forward pass, many chains per batch.

Inputs go through `tokenize_chain`, the function training used, so a chain scores the same here as in training's
evaluation. A public PRM's folder (Qwen2.5-Math-PRM, Math-Shepherd, RLHFlow, a PRM trained by TRL's PRMTrainer) is
read through its own format instead (`prmkit.scoring.formats`), behind the same methods. Chains are sorted by length before batching so padding
stays small, each batch is padded once, and the model has no LM head, so no vocabulary-sized logits are computed.
Chains with one prompt (a best-of-N or GRPO group) read its tokens once (`prmkit.scoring.prefix`), and inside
`kept_caches` (a tree search's rounds) a chain runs only the tokens after a chain scored by an earlier call
(`prmkit.scoring.kv_store`).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Sequence

import torch
from transformers import DynamicCache

from prmkit.device import check_compilable, compile_failure, raised_while_compiling, resolve_device, resolve_dtype
from prmkit.errors import PRMError
from prmkit.loss import scores_from_head
from prmkit.model import METADATA_FILE, PRMMetadata, context_length, head_name, load_prm
from prmkit.model import merge_adapter as merge_lora_adapter
from prmkit.scoring.aggregate import RankedCandidate, rank_candidates
from prmkit.scoring.formats import (
    PUBLIC_MAX_LENGTH,
    SEPARATOR,
    ChainReader,
    detect_format,
    load_public_prm,
    model_folder,
)
from prmkit.scoring.inputs import Candidate, Separator, split_steps
from prmkit.scoring.kv_store import KEPT_CACHE_MB, KVStore, partial_cache_layers
from prmkit.scoring.prefix import KeptChain, cache_argument, forward_after, kept_row, read_prefix, shared_prefix_groups
from prmkit.scoring.options import ScoringOptions
from prmkit.tokenize import StepCollator, TokenizedChain, tokenize_chain

DEFAULTS = ScoringOptions()
# which public formats read each of from_pretrained's token settings
READ_BY = {"step_tag": ("math-shepherd",), "good_token": ("math-shepherd", "rlhflow"),
           "bad_token": ("math-shepherd", "rlhflow"), "step_separator": ("trl",)}


class PRMScorer:
    """A loaded PRM that scores steps. `PRMScorer.from_pretrained(folder)` takes a run folder, any checkpoint in
    it (LoRA adapter or full weights), a merged export, or a public PRM's folder. `reader` is a public format's
    (None for a prmkit PRM): its model gives a probability per position, read where the format says."""

    def __init__(self, model, tokenizer, metadata: PRMMetadata, *, device: str | None = DEFAULTS.device,
                 dtype: str | torch.dtype | None = DEFAULTS.dtype, batch_size: int = DEFAULTS.batch_size,
                 max_batch_tokens: int | None = DEFAULTS.max_batch_tokens, reader: ChainReader | None = None,
                 reuse_prefix: bool = True, compile: bool = DEFAULTS.compile):
        ScoringOptions(batch_size=batch_size, max_batch_tokens=max_batch_tokens)  # raises on values out of range
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        if self.dtype != torch.float32:
            _head_in_fp32(self.model)
        self.tokenizer = tokenizer
        self.metadata = metadata
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.reader = reader
        self.prm_format = "prmkit" if reader is None else reader.name
        self._said_why_whole = False
        self.reuse_prefix = reuse_prefix
        self._kept: KVStore | None = None  # keys and values kept across calls, inside `kept_caches` only
        self._whole_forward = self._compiled_model() if compile else self.model

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, device: str | None = DEFAULTS.device,
                        dtype: str | torch.dtype | None = DEFAULTS.dtype, batch_size: int = DEFAULTS.batch_size,
                        max_batch_tokens: int | None = DEFAULTS.max_batch_tokens, trust_remote_code: bool = False,
                        allow_pickle: bool = False, merge_adapter: bool = True,
                        max_length: int | None = DEFAULTS.max_length, prm_format: str | None = DEFAULTS.prm_format,
                        step_tag: str = ChainReader.step_tag, good_token: str = ChainReader.good_token,
                        bad_token: str = ChainReader.bad_token, step_separator: str = ChainReader.step_separator,
                        reuse_prefix: bool = True, compile: bool = DEFAULTS.compile) -> "PRMScorer":
        """Load for inference. A LoRA adapter is merged into the weights (in fp32, before any cast), which gives
        the same scores with no adapter overhead per layer. `max_length` replaces the training length, to read
        longer chains than the PRM was trained on, up to the backbone's context (beyond it is refused, as is a run
        whose training max_length exceeds it). `batch_size` caps the chains per forward pass and `max_batch_tokens`
        the padded tokens (chains x longest chain), so a batch of long chains stays within device memory.
        `allow_pickle` as in the training config. `prm_format` (prmkit, qwen, math-shepherd, rlhflow, trl; None:
        detected from the folder) says how to read it; `step_tag`, `good_token` and `bad_token` are the
        math-shepherd and rlhflow formats' tokens, `step_separator` the trl format's (TRL's PRMConfig.step_separator,
        which a TRL run does not save). A public format never runs code from its folder, so `trust_remote_code`
        applies to prmkit runs only, and loads straight in `dtype` (a prmkit run loads in fp32 to merge its adapter,
        then is cast). `reuse_prefix` (default on) reads tokens that several
        chains of one call begin with once (`prmkit.scoring.prefix`); off, every chain is read whole."""
        model, tokenizer, metadata, reader = _load(
            folder, prm_format, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
            dtype=resolve_dtype(dtype, resolve_device(device)),
            tokens={"step_tag": step_tag, "good_token": good_token, "bad_token": bad_token,
                    "step_separator": step_separator})
        limit = context_length(model.config)
        if max_length is not None:
            if max_length < 8:
                raise PRMError(f"max_length={max_length}; use at least 8 tokens (training used "
                               f"{metadata.max_length})")
            if limit is not None and max_length > limit:
                raise PRMError(f"max_length={max_length} is beyond the context of the model in {folder}: it reads at "
                               f"most {limit} tokens; use max_length={limit} or less")
            metadata = replace(metadata, max_length=max_length)
        elif limit is not None and metadata.max_length > limit:
            raise PRMError(f"{folder}: its {METADATA_FILE} says max_length={metadata.max_length}, beyond the model's "
                           f"context of {limit} tokens; pass max_length={limit} or less (--max-length {limit} on the "
                           "command line)")
        if merge_adapter:
            model = merge_lora_adapter(model)
        return cls(model, tokenizer, metadata, device=device, dtype=dtype, batch_size=batch_size,
                   max_batch_tokens=max_batch_tokens, reader=reader, reuse_prefix=reuse_prefix, compile=compile)

    @classmethod
    def from_options(cls, folder: str | Path, options: ScoringOptions, **kwargs) -> "PRMScorer":
        """`from_pretrained` with the settings of `prmkit score`, `prmkit eval` and `prmkit serve`."""
        if options.step_separator is not None:
            kwargs.setdefault("step_separator", options.step_separator)
        return cls.from_pretrained(folder, device=options.device, dtype=options.dtype, batch_size=options.batch_size,
                                   max_batch_tokens=options.max_batch_tokens, max_length=options.max_length,
                                   prm_format=options.prm_format, compile=options.compile, **kwargs)

    def tokenize(self, prompt: str, steps: Sequence[str], max_length: int | None = None) -> TokenizedChain:
        """The ids the model reads for a chain and where each step's score is read (at most `max_length` tokens,
        default the scorer's)."""
        max_length = max_length or self.metadata.max_length
        if self.reader is not None:
            return self.reader.tokenize(self.tokenizer, prompt, steps, max_length)
        return tokenize_chain(self.tokenizer, prompt, steps, None, separator=self.metadata.separator,
                              max_length=max_length)

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

    @contextmanager
    def kept_caches(self, max_mb: float = KEPT_CACHE_MB) -> Iterator[KVStore | None]:
        """Keep the keys and values of every chain scored inside the block, so that a later `score_many` call in it
        runs each chain only after the longest kept chain it begins with (`prmkit.scoring.kv_store`): a tree
        search's round then reads only its new steps. Scores are those of a full pass. At most `max_mb` mebibytes
        are kept, the least recently used chains dropped first, and all of it is freed when the block ends. Yields
        the store, or None where nothing can be kept (a public format, reuse_prefix off, a model with
        sliding-window or other layers that do not keep every token), which then scores as without the block.
        Inside an active block, the outer block's store goes on being used."""
        store = KVStore(max_mb)  # raises on a budget out of range
        if self._kept is not None or not self.reuse_prefix:
            yield self._kept if self.reuse_prefix else None
            return
        self._kept = store
        try:
            yield store
        finally:
            self._kept = None

    @property
    def reuse_prefix(self) -> bool:
        """Whether chains of one call read the tokens they begin with once (`prmkit.scoring.prefix`): asked for, and
        possible (not a public format's own forward pass, nor a cache whose layers do not keep every token)."""
        return self._reuse_prefix

    @reuse_prefix.setter
    def reuse_prefix(self, wanted: bool) -> None:
        partial = partial_cache_layers(self.model) if wanted and self.reader is None else None
        if partial and not self._said_why_whole:
            self._said_why_whole = True
            print(f"prmkit: reuse_prefix is off for this model: its cache layers ({partial}) do not keep every "
                  "token's keys and values, so every chain is read whole (the same scores, more tokens read); pass "
                  "reuse_prefix=False to leave it off without this note", file=sys.stderr, flush=True)
        self._reuse_prefix = bool(wanted) and self.reader is None and partial is None

    @property
    def compiled(self) -> bool:
        """Whether whole-chain batches run through torch.compile (`compile=True`)."""
        return self._whole_forward is not self.model

    @property
    def _store(self) -> KVStore | None:
        """The kept caches in use: None outside `kept_caches`, and while reuse_prefix is off."""
        return self._kept if self.reuse_prefix else None

    @torch.inference_mode()
    def score_many(self, chains: Sequence[tuple[str, Sequence[str]]]) -> list[list[float | None]]:
        """Scores for many (prompt, steps) chains, in input order; batches are formed by length."""
        tokenized = [self.tokenize(prompt, steps) for prompt, steps in chains]
        results: list[list[float | None]] = [[None] * chain.steps_dropped for chain in tokenized]
        scorable = [i for i in range(len(tokenized)) if tokenized[i].step_positions]  # else no step fits
        starts: dict[int, KeptChain] = {}
        if self._store is not None:
            scorable, starts = self._look_up_kept(tokenized, scorable, results)
        groups, scorable = shared_prefix_groups(tokenized, scorable, [p for p, _ in chains]) if self.reuse_prefix \
            else ([], scorable)
        groups, scorable = _leave_groups_for_kept(groups, scorable, starts)
        after = {i: starts[i] for i in scorable if i in starts}
        for shared, members in groups:
            after.update(dict.fromkeys(members, self._read_shared(tokenized, shared, members)))
        # the continuations of every group (and of every kept start) in one length-sorted run of batches, so a
        # group's short and long continuations pad against others of their length, not against each other
        self._score_after(tokenized, after, results)
        self._score_whole(tokenized, [i for i in scorable if i not in starts], results)
        return results

    def _look_up_kept(self, tokenized: list[TokenizedChain], indices: list[int],
                      results: list) -> tuple[list[int], dict[int, KeptChain]]:
        """A chain kept whole is answered from its kept scores; the others get the longest kept chain they begin
        with, where there is one. Returns the chains left to run, and those kept starts."""
        left, starts = [], {}
        for index in indices:
            chain = tokenized[index]
            kept = self._store.longest_prefix(chain.input_ids)
            if kept is not None and len(kept) == len(chain.input_ids):
                results[index] = _step_scores(chain, kept.scores)
                continue
            left.append(index)
            if kept is not None:
                starts[index] = kept
        return left, starts

    def _score_whole(self, tokenized: list[TokenizedChain], indices: list[int], results: list) -> None:
        """Chains read from their first token, in length-sorted batches padded by the training collator."""
        collate = StepCollator(self.tokenizer.pad_token_id)
        lengths = [len(chain.input_ids) for chain in tokenized]
        for batch_indices in self._batches(sorted(indices, key=lambda i: lengths[i]), lengths):
            batch = [tokenized[i] for i in batch_indices]
            inputs = collate([{"input_ids": chain.input_ids} for chain in batch])
            cache = DynamicCache(config=self.model.config) if self._store is not None else None
            keep = {"use_cache": True, cache_argument(self.model): cache} if cache is not None else {}
            # the compiled model runs plain batches; one that fills a cache to keep runs eager
            forward = self.model if cache is not None else self._whole_forward
            output = self._run(forward, input_ids=inputs["input_ids"].to(self.device),
                               attention_mask=inputs["attention_mask"].to(self.device), **keep)
            # A public format's model gives its step probabilities already; a prmkit PRM gives the head's output.
            scores = output.cpu() if self.reader is not None else self._head_scores(output)
            for row, (index, chain) in enumerate(zip(batch_indices, batch)):
                results[index] = _step_scores(chain, scores[row])
                if cache is not None:
                    length = len(chain.input_ids)
                    self._store.add(kept_row(cache, row, 0, length, chain.input_ids, scores[row, :length].clone()))

    def _read_shared(self, tokenized: list[TokenizedChain], shared: int, members: list[int]) -> KeptChain:
        """The first `shared` tokens of the chains `members`, which they all begin with, read once (only the ones
        after the longest kept chain they begin with)."""
        ids = tokenized[members[0]].input_ids[:shared]
        start = self._store.longest_prefix(ids) if self._store is not None else None
        return read_prefix(self.model, ids, self.device, self._head_scores, start)

    def _score_after(self, tokenized: list[TokenizedChain], starts: dict[int, KeptChain], results: list) -> None:
        """Each chain run on from its start (a shared prefix, or a chain kept from an earlier call): only the tokens
        after it, in batches; the scores of steps that end inside the start are read from it."""
        if not starts:
            return
        rest = {i: len(tokenized[i].input_ids) - len(starts[i]) for i in starts}  # the tokens each chain still runs
        cached = max(len(start) for start in starts.values())
        for indices in self._batches(sorted(starts, key=rest.get), rest, cached=cached):
            output, cache, width = forward_after(self.model, [starts[i] for i in indices],
                                                 [tokenized[i].input_ids[len(starts[i]):] for i in indices],
                                                 self.tokenizer.pad_token_id, self.device)
            scores = self._head_scores(output)
            for row, index in enumerate(indices):
                start, chain = starts[index], tokenized[index]
                every_position = torch.cat([start.scores, scores[row, :rest[index]]])
                results[index] = _step_scores(chain, every_position)
                if self._store is not None:
                    self._store.add(kept_row(cache, row, width - len(start), width + rest[index], chain.input_ids,
                                             every_position))

    def warm_up(self) -> float:
        """Compile now, not at the first real call (a server does this before it listens): score a batch of two
        short chains and a batch of one. Returns the seconds it took; nothing to do unless compiled."""
        if not self.compiled:
            return 0.0
        started = time.perf_counter()
        self.score_many([("What is 1 + 1?", ["1 + 1 = 2.", "The answer is 2."]), ("What is 2 + 3?", ["2 + 3 = 5."])])
        self.score_many([("What is 4 - 1?", ["4 - 1 = 3."])])
        return time.perf_counter() - started

    def _compiled_model(self):
        """The model under torch.compile for whole-chain batches: shapes symbolic from the first call (one graph
        for every batch size and length, a second for batches of one chain, which torch.compile specialises), and
        weights frozen as constants, which lets inductor fold and pre-pack them (BENCHMARKS.md, "Compiled
        scoring"). Frozen weights are read at compilation: a model whose weights change afterwards needs a new
        scorer."""
        if self.reader is not None:
            raise PRMError(f"compile applies to prmkit PRMs; this is a {self.prm_format} PRM, read through its own "
                           "format's forward pass. Leave compile off for it")
        check_compilable(self.device.type, "compile")
        return torch.compile(self.model, dynamic=True, options={"freezing": True})

    def _run(self, forward, **inputs):
        """`forward(**inputs)`, with a failure inside torch.compile turned into the setting to change."""
        try:
            return forward(**inputs)
        except Exception as err:
            if forward is self.model or not raised_while_compiling(err):
                raise
            raise PRMError(f"compile: torch.compile failed on this model "
                           f"({compile_failure(err)}); score without compile (drop --compile, "
                           "or compile=False)") from err

    def _head_scores(self, output) -> torch.Tensor:
        """The step score at every position of a prmkit PRM's output ([rows, tokens], on the CPU)."""
        return scores_from_head(self.metadata.loss, output.logits.squeeze(-1)).cpu()

    def _batches(self, order: list[int], lengths, cached: int = 0):
        """Consecutive runs of the length-sorted chains (`lengths[i]`: the tokens chain i runs in this pass, after
        `cached` tokens it reads from a shared prefix): at most batch_size chains, at most max_batch_tokens padded
        tokens (a chain longer than the budget on its own still gets a batch of one), and never mostly padding: a
        chain that would make its batch more than half padding starts a new one. One runaway sample among an RL
        group's ordinary ones (a 1,024-token loop beside 150-token chains) then costs its own tokens, not 16 x 1,024
        (measured in BENCHMARKS.md, "RL rewards")."""
        batch: list[int] = []
        real = 0  # tokens of the batch's chains, without padding
        for index in order:
            length = lengths[index]  # the longest so far, as the order is ascending
            padded = (len(batch) + 1) * length
            over_budget = self.max_batch_tokens is not None and (len(batch) + 1) * (cached + length) > \
                self.max_batch_tokens
            mostly_padding = padded > 2 * (real + length)
            if batch and (len(batch) == self.batch_size or over_budget or mostly_padding):
                yield batch
                batch, real = [], 0
            batch.append(index)
            real += length
        if batch:
            yield batch


def _step_scores(chain: TokenizedChain, every_position: torch.Tensor) -> list[float | None]:
    """A chain's step scores from the scores at each of its positions; None for each step max_length dropped."""
    return every_position[chain.step_positions].tolist() + [None] * chain.steps_dropped


def _leave_groups_for_kept(groups: list[tuple[int, list[int]]], rest: list[int],
                           starts: dict[int, KeptChain]) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """A chain whose kept start reaches as far as its cluster's shared tokens runs on from that instead; a cluster
    left with one chain is no cluster."""
    kept_groups, rest = [], list(rest)
    for shared, members in groups:
        staying = [m for m in members if m not in starts or len(starts[m]) < shared]
        rest += [m for m in members if m not in staying]
        if len(staying) > 1:
            kept_groups.append((shared, staying))
        else:
            rest += staying
    return kept_groups, rest


def _load(folder: str | Path, prm_format: str | None, *, trust_remote_code: bool, allow_pickle: bool,
          dtype: torch.dtype, tokens: dict[str, str]):
    """(model, tokenizer, metadata, reader) of a prmkit run or a public PRM (reader None for a prmkit run)."""
    ScoringOptions(prm_format=prm_format)  # raises on a format name it does not know
    folder = model_folder(folder, allow_pickle)
    if prm_format is None:
        prm_format, why = detect_format(folder)
        if prm_format != "prmkit":  # a guess from the folder: say it, so a wrong one is seen and overridden
            print(f"prmkit: reading {folder} as a {prm_format} PRM (from its {why}); pass prm_format= "
                  "(--prm-format) to read it as another format", file=sys.stderr, flush=True)
    changed = {k: v for k, v in tokens.items() if v != getattr(ChainReader, k)}
    unread = [k for k in changed if prm_format not in READ_BY[k]]
    if unread:
        raise PRMError(f"{', '.join(f'{k}={changed[k]!r}' for k in unread)} given for a {prm_format} PRM, which does "
                       "not read it; " + "; ".join(f"{k} is the {' and '.join(READ_BY[k])} format's" for k in unread))
    if prm_format == "prmkit":
        model, tokenizer, metadata = load_prm(folder, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
        return model, tokenizer, metadata, None
    reader = ChainReader(prm_format, **tokens)
    model, tokenizer = load_public_prm(folder, reader, allow_pickle=allow_pickle, dtype=dtype)
    return model, tokenizer, _public_metadata(folder, reader, context_length(model.config)), reader


def _public_metadata(folder: str | Path, reader: ChainReader, context: int | None) -> PRMMetadata:
    """What the scorer needs to know of a public PRM: its scores are probabilities (read as a bce run's), raw
    completions are cut at blank lines (a trl PRM's at its step separator, as it read its steps in training), and
    it reads up to PUBLIC_MAX_LENGTH tokens or its context."""
    max_length = min(PUBLIC_MAX_LENGTH, context or PUBLIC_MAX_LENGTH)
    separator = reader.step_separator if reader.name == "trl" and reader.step_separator else SEPARATOR
    return PRMMetadata(base_model=str(folder), base_path=str(folder), finetune=reader.name, loss="bce",
                       separator=separator, max_length=max_length, label_scheme="binary")


def _head_in_fp32(model) -> None:
    """Run the head in fp32 on a bf16/fp16 backbone. A bf16 output has 8 bits of mantissa: logits 2.010 and 2.014
    both come out as 2.0156, so at N=16-64 candidates distinct chains tie and input order picks the winner. The
    head is one matrix-vector product per position, so fp32 costs nothing measurable; its input, the backbone's
    last hidden state, is cast up on the way in."""
    head = getattr(model, head_name(model))
    head.float()
    head.register_forward_pre_hook(lambda module, args: tuple(
        a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args))
