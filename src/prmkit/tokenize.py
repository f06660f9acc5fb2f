"""The one function that turns prompt + steps into token ids, step positions and labels.

Training, evaluation and scoring all call `tokenize_chain`, so a score never depends on which code path built
the input. Layout: [bos] ids(prompt) ids(sep) | ids(step_0) ids(sep) | ids(step_1) ids(sep) | ...
Each step's label sits on the last token of its span (the separator's last token). Ids are concatenated, never
searched for, so a separator that tokenizes differently in context cannot silently lose a step position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

IGNORE_INDEX = -100.0  # label value for tokens that carry no step label; float, like the labels themselves


@dataclass
class TokenizedChain:
    input_ids: list[int]
    labels: list[float]  # IGNORE_INDEX except at step positions with a label
    step_positions: list[int]  # one per kept step, labelled or not
    steps_kept: int
    steps_dropped: int  # steps cut off by max_length (never labelled)
    prompt_tokens_dropped: int = 0
    record_index: int = -1  # the record's position in tokenize_records' input, which drops rows (-1: not from it)


@dataclass
class TokenizationStats:
    rows: int = 0
    rows_dropped: int = 0  # no labelled step survived truncation
    steps: int = 0
    steps_dropped: int = 0
    labelled_steps: int = 0
    prompts_truncated: int = 0
    tokens: int = 0
    drop_reasons: dict[str, int] = field(default_factory=dict)

    def add(self, chain: TokenizedChain | None, total_steps: int, reason: str | None = None) -> None:
        self.rows += 1
        self.steps += total_steps
        if chain is None:
            self.rows_dropped += 1
            self.steps_dropped += total_steps
            self.drop_reasons[reason or "dropped"] = self.drop_reasons.get(reason or "dropped", 0) + 1
            return
        self.steps_dropped += chain.steps_dropped
        self.labelled_steps += sum(1 for x in chain.labels if x != IGNORE_INDEX)
        self.prompts_truncated += int(chain.prompt_tokens_dropped > 0)
        self.tokens += len(chain.input_ids)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def prompt_prefix(tokenizer) -> list[int]:
    """A BOS token where the tokenizer defines one, so the first real token is read in its usual context."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return [bos] if bos is not None else []


def tokenize_chain(tokenizer, prompt: str, steps: Sequence[str], labels: Sequence[float | None] | None = None, *,
                   separator: str, max_length: int, train_on_last_step_only: bool = False) -> TokenizedChain:
    """Token ids, per-token labels and step positions for one chain.

    Truncation keeps whole steps only: steps that do not fit in `max_length` are dropped (and counted), never cut,
    so a label never sits on a partial step. The prompt is left-truncated (its start is dropped, BOS kept) only as
    far as needed for the first step to fit; a first step longer than the whole budget keeps no steps at all.
    """
    if labels is not None and len(labels) != len(steps):
        raise ValueError(f"{len(labels)} labels for {len(steps)} steps")
    sep_ids = encode(tokenizer, separator) if separator else []
    prefix = prompt_prefix(tokenizer)
    if max_length <= len(prefix):
        raise ValueError(f"max_length={max_length} leaves no room for any token after the BOS token; "
                         "use a larger max_length (data.max_length)")
    prompt_ids = encode(tokenizer, prompt) + sep_ids
    spans = [encode(tokenizer, step) + sep_ids for step in steps]

    prompt_budget = max_length - len(prefix) - (len(spans[0]) if spans else 0)
    dropped_prompt = max(0, len(prompt_ids) - max(prompt_budget, 0))
    if dropped_prompt:
        prompt_ids = prompt_ids[dropped_prompt:]
    input_ids = prefix + prompt_ids

    positions: list[int] = []
    for span in spans:
        if not span or len(input_ids) + len(span) > max_length:
            break
        input_ids = input_ids + span
        positions.append(len(input_ids) - 1)

    token_labels = [IGNORE_INDEX] * len(input_ids)
    if labels is not None:
        last_step = len(steps) - 1
        for index, position in enumerate(positions):
            value = labels[index]
            if value is None or (train_on_last_step_only and index != last_step):
                continue
            token_labels[position] = float(value)
    return TokenizedChain(input_ids=input_ids, labels=token_labels, step_positions=positions,
                          steps_kept=len(positions), steps_dropped=len(steps) - len(positions),
                          prompt_tokens_dropped=dropped_prompt)


def tokenize_records(tokenizer, records: Sequence[dict], *, separator: str, max_length: int,
                     train_on_last_step_only: bool = False) -> tuple[list[TokenizedChain], TokenizationStats]:
    """Tokenize training records; rows left with no labelled step are dropped and counted, with the reason."""
    stats = TokenizationStats()
    kept = []
    for index, record in enumerate(records):
        chain = tokenize_chain(tokenizer, record["prompt"], record["completions"], record["labels"],
                               separator=separator, max_length=max_length,
                               train_on_last_step_only=train_on_last_step_only)
        if chain.steps_kept == 0:
            stats.add(None, len(record["completions"]), "first step longer than max_length")
        elif all(x == IGNORE_INDEX for x in chain.labels):
            stats.add(None, len(record["completions"]), "no labelled step within max_length")
        else:
            stats.add(chain, len(record["completions"]))
            chain.record_index = index
            kept.append(chain)
    return kept, stats


class StepCollator:
    """Right-pads a batch; labels stay float32 with IGNORE_INDEX where there is no step label."""

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None):
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, features: list[dict]) -> dict:
        import torch

        length = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(features), length), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(features), length), dtype=torch.long)
        labels = torch.full((len(features), length), IGNORE_INDEX, dtype=torch.float32)
        for row, feature in enumerate(features):
            n = len(feature["input_ids"])
            input_ids[row, :n] = torch.tensor(feature["input_ids"], dtype=torch.long)
            attention_mask[row, :n] = 1
            if "labels" in feature:
                labels[row, :n] = torch.tensor(feature["labels"], dtype=torch.float32)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if any("labels" in f for f in features):
            batch["labels"] = labels
        return batch

