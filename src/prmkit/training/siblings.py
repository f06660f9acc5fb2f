"""Samples of one prompt kept together, for the ranking term (`loss.ranking_weight`) and the within-problem
validation metric: which chains are siblings and which of them are right, batches built from whole prompt groups,
and the collator that carries each row's group and outcome to the loss.

A sample is right when its row says so (`"correct": true`, the outcome of its final answer) and otherwise when its
last labelled step is labelled right (>= 0.5): with Math-Shepherd-style Monte-Carlo labels the last step's label
is the estimate that the final answer is right, and with first-error labels a wrong chain's last step is wrong.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from prmkit.errors import PRMError

GROUP_IDS = "group_ids"  # batch keys the trainer pops before the forward pass
CHAIN_CORRECT = "chain_correct"
NO_GROUP = -1  # a chain that takes part in no pair


@dataclass
class Siblings:
    """Per chain (in the order of the tokenized chains): its prompt's group id, or NO_GROUP for a chain whose steps
    max_length cut (a ranking must never reward or punish steps the PRM did not see), and whether it is right."""
    groups: list[int]
    correct: list[bool]
    prompts: int = 0  # distinct prompts, cut chains' included

    @property
    def ranked_prompts(self) -> int:
        """Prompts with both a right and a wrong chain: the ones that give pairs."""
        outcomes: dict[int, set[bool]] = defaultdict(set)
        for group, right in zip(self.groups, self.correct):
            if group != NO_GROUP:
                outcomes[group].add(right)
        return sum(1 for seen in outcomes.values() if len(seen) == 2)

    def problem_groups(self) -> list[list[int]]:
        """Chain indices per prompt group, first appearance first."""
        members: dict[int, list[int]] = defaultdict(list)
        for index, group in enumerate(self.groups):
            if group != NO_GROUP:
                members[group].append(index)
        return list(members.values())


def record_correct(record: dict, row: int, source: str) -> bool:
    """Whether a record's sample is right: its `correct` field where it has one, else its last labelled step."""
    value = record.get("correct")
    if value is not None:
        if not isinstance(value, bool):
            raise PRMError(f"{source}: row {row} (counting valid rows), field 'correct': {value!r} is a "
                           f"{type(value).__name__}; use true or false (whether the final answer is right), or leave "
                           "the field out to read it from the last labelled step")
        return value
    labelled = [label for label in record["labels"] if label is not None]
    return bool(labelled) and labelled[-1] >= 0.5


def sibling_groups(records: Sequence[dict], source: str, chains=None) -> Siblings:
    """The Siblings of `chains` (tokenize_records' output, which drops rows) of `records`, or of the records
    themselves before tokenization (every chain whole); prompts are grouped by their exact text."""
    ids: dict[str, int] = {}
    groups, correct = [], []
    if chains is None:
        entries = [(index, False) for index in range(len(records))]
    else:
        entries = [(chain.record_index, chain.steps_dropped > 0) for chain in chains]
    for index, cut in entries:
        record = records[index]
        group = ids.setdefault(record["prompt"], len(ids))
        groups.append(NO_GROUP if cut else group)
        correct.append(record_correct(record, index + 1, source))
    return Siblings(groups, correct, prompts=len(ids))


def check_rankable(siblings: Siblings, source: str, weight: float) -> None:
    """Refuse a ranking term that would find no pair in the training data."""
    if siblings.ranked_prompts:
        return
    raise PRMError(f"{source}: loss.ranking_weight={weight} ranks right above wrong samples of the same prompt, but "
                   f"none of its {siblings.prompts} prompts has both a right and a wrong sample that fits "
                   "data.max_length (right: `\"correct\": true`, else the last labelled step labelled right). Give "
                   "several samples per prompt, raise data.max_length, or set loss.ranking_weight=0")


class SiblingBatchSampler:
    """Batches of whole prompt groups, reshuffled each epoch from (seed, epoch): every row once per epoch, each
    group that fits in `batch_size` inside one batch, so its right and wrong samples meet in the ranking term.

    A group larger than `batch_size` is dealt into the fewest chunks that fit, its rarer outcome first, so each
    chunk holds both outcomes where the group has enough of them. Pieces are packed largest first into the fullest
    batch they fit (best fit decreasing), so batches hold up to `batch_size` rows and their number depends only on
    the group sizes: the same every epoch, as the engine counts steps once. No `batch_size` attribute: accelerate
    then shards these variable batches whole across processes."""

    def __init__(self, groups: Sequence[int], correct: Sequence[bool], capacity: int, seed: int):
        if len(groups) != len(correct):
            raise ValueError(f"{len(groups)} group ids for {len(correct)} outcomes")
        self.groups, self.correct, self.capacity, self.seed = list(groups), list(correct), capacity, seed
        self.epoch = 0
        self._length = len(self._batches(random.Random(seed)))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches(random.Random(f"{self.seed}:{self.epoch}"))
        assert len(batches) == self._length, "the number of batches depends on the group sizes only"
        yield from batches

    def _batches(self, rng: random.Random) -> list[list[int]]:
        members: dict[int, list[int]] = defaultdict(list)
        pieces: list[list[int]] = []
        for index, group in enumerate(self.groups):
            if group == NO_GROUP:
                pieces.append([index])
            else:
                members[group].append(index)
        for rows in members.values():
            pieces += self._chunks(rows, rng)
        rng.shuffle(pieces)
        pieces.sort(key=len, reverse=True)  # stable: equal sizes keep their shuffled order
        batches: list[list[int]] = []
        open_by_room: dict[int, list[int]] = defaultdict(list)  # room left -> batches with that room
        for piece in pieces:
            room = next((r for r in range(len(piece), self.capacity) if open_by_room[r]), None)
            if room is None:
                batches.append([])
                target, room = len(batches) - 1, self.capacity
            else:
                target = open_by_room[room].pop()
            batches[target] += piece
            if room - len(piece):
                open_by_room[room - len(piece)].append(target)
        rng.shuffle(batches)
        return batches

    def _chunks(self, rows: list[int], rng: random.Random) -> list[list[int]]:
        rng.shuffle(rows)
        if len(rows) <= self.capacity:
            return [rows]
        right = [r for r in rows if self.correct[r]]
        wrong = [r for r in rows if not self.correct[r]]
        rarer, commoner = sorted((right, wrong), key=len)
        dealt = rarer + commoner
        count = math.ceil(len(rows) / self.capacity)
        return [dealt[start::count] for start in range(count)]


class SiblingCollator:
    """The run's collator, plus each row's group id and outcome as tensors (which the trainer pops before the
    forward pass). Rows without a group (evaluation rows) pass through as the base collator makes them."""

    def __init__(self, base):
        self.base = base

    def __call__(self, features: list[dict]) -> dict:
        batch = self.base(features)
        if features and "group" in features[0]:
            batch[GROUP_IDS] = torch.tensor([f["group"] for f in features], dtype=torch.long)
            batch[CHAIN_CORRECT] = torch.tensor([f["correct"] for f in features], dtype=torch.bool)
        return batch
