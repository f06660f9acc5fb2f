"""Samples of one prompt kept together: which chains are siblings and which are right, batches of whole prompt
groups (every row once per epoch), and the collator that carries group and outcome to the loss."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from prmkit.errors import PRMError
from prmkit.tokenize import StepCollator, TokenizedChain, tokenize_records
from prmkit.training.siblings import (
    CHAIN_CORRECT,
    GROUP_IDS,
    NO_GROUP,
    SiblingBatchSampler,
    SiblingCollator,
    Siblings,
    check_rankable,
    record_correct,
    sibling_groups,
)


def chain(record_index: int, steps_dropped: int = 0) -> TokenizedChain:
    return TokenizedChain(input_ids=[1, 2], labels=[-100.0, 1.0], step_positions=[1], steps_kept=1,
                          steps_dropped=steps_dropped, record_index=record_index)


def record(prompt: str, labels: list, **extra) -> dict:
    return {"prompt": prompt, "completions": ["a"] * len(labels), "labels": labels, **extra}


def test_a_sample_is_right_by_its_correct_field_else_by_its_last_labelled_step():
    assert record_correct(record("p", [1.0, 0.0]), 1, "t.jsonl") is False
    assert record_correct(record("p", [0.0, 1.0, None]), 1, "t.jsonl") is True  # the last *labelled* step
    assert record_correct(record("p", [0.0, 0.0], correct=True), 1, "t.jsonl") is True  # the field wins
    assert record_correct(record("p", [0.6]), 1, "t.jsonl") is True  # a soft label at 0.5 or above
    with pytest.raises(PRMError, match=r"t.jsonl: row 7 .*field 'correct': 'yes' is a str; use true or false"):
        record_correct(record("p", [1.0], correct="yes"), 7, "t.jsonl")


def test_groups_follow_prompts_and_a_cut_chain_joins_no_pair():
    records = [record("A", [1.0]), record("dropped by tokenize", [1.0]), record("B", [0.0]), record("A", [0.0]),
               record("B", [1.0])]
    chains = [chain(0), chain(2), chain(3), chain(4, steps_dropped=1)]
    siblings = sibling_groups(records, "t.jsonl", chains)
    assert siblings.groups == [0, 1, 0, NO_GROUP]
    assert siblings.correct == [True, False, False, True]
    assert siblings.ranked_prompts == 1  # A has a right and a wrong; B's right chain was cut
    assert siblings.problem_groups() == [[0, 2], [1]]
    assert siblings.prompts == 2
    # before tokenization every record is a whole chain
    whole = sibling_groups(records, "t.jsonl")
    assert whole.groups == [0, 1, 2, 0, 2] and whole.ranked_prompts == 2


def test_data_without_a_prompt_holding_both_outcomes_is_refused_with_the_fix():
    with pytest.raises(PRMError) as err:
        check_rankable(Siblings(groups=[0, 1, 1], correct=[True, False, False], prompts=2), "t.jsonl", 0.5)
    message = str(err.value)
    assert message.startswith("t.jsonl: loss.ranking_weight=0.5") and "none of its 2 prompts" in message
    assert "set loss.ranking_weight=0" in message
    check_rankable(Siblings(groups=[0, 0], correct=[True, False]), "t.jsonl", 0.5)


def epoch_batches(sampler: SiblingBatchSampler, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_every_row_once_per_epoch_and_each_group_that_fits_in_one_batch():
    sizes = [3, 1, 4, 2, 2, 3, 1, 4, 2]  # rows per prompt, plus two rows of no group
    groups = [g for g, n in enumerate(sizes) for _ in range(n)] + [NO_GROUP, NO_GROUP]
    correct = [i % 2 == 0 for i in range(len(groups))]
    sampler = SiblingBatchSampler(groups, correct, capacity=4, seed=7)
    orders = []
    for epoch in range(3):
        batches = epoch_batches(sampler, epoch)
        assert len(batches) == len(sampler)
        rows = [i for batch in batches for i in batch]
        assert sorted(rows) == list(range(len(groups)))  # each row exactly once
        assert all(1 <= len(batch) <= 4 for batch in batches)
        for group in range(len(sizes)):
            holding = [b for b, batch in enumerate(batches) if any(groups[i] == group for i in batch)]
            assert len(holding) == 1, f"group {group} split across batches {holding}"
        orders.append(rows)
    assert orders[0] != orders[1] != orders[2]  # reshuffled each epoch
    assert epoch_batches(SiblingBatchSampler(groups, correct, 4, seed=7), 1) == epoch_batches(sampler, 1)
    # 24 rows in batches of at most 4: best fit packs them into 6 full batches
    assert len(sampler) == 6


def test_a_group_larger_than_the_batch_is_split_into_chunks_that_each_hold_both_outcomes():
    groups = [0] * 11 + [1] * 2
    correct = [True] * 3 + [False] * 8 + [True, False]
    sampler = SiblingBatchSampler(groups, correct, capacity=4, seed=0)
    for epoch in range(4):
        batches = epoch_batches(sampler, epoch)
        assert sorted(i for batch in batches for i in batch) == list(range(13))
        chunks = [[i for i in batch if groups[i] == 0] for batch in batches]
        chunks = [c for c in chunks if c]
        assert sorted(len(c) for c in chunks) == [3, 4, 4]  # the fewest chunks that fit: ceil(11 / 4) = 3
        assert all({correct[i] for i in c} == {True, False} for c in chunks)  # 3 right rows, one per chunk
        assert any({11, 12} <= set(batch) for batch in batches)  # the small group stays whole


def test_the_collator_adds_group_and_outcome_tensors_only_to_rows_that_carry_them():
    collate = SiblingCollator(StepCollator(pad_token_id=0))
    features = [{"input_ids": [5, 6, 7], "labels": [-100.0, -100.0, 1.0], "group": 3, "correct": True},
                {"input_ids": [5, 8], "labels": [-100.0, 0.0], "group": 3, "correct": False}]
    batch = collate(features)
    assert batch[GROUP_IDS].tolist() == [3, 3] and batch[CHAIN_CORRECT].tolist() == [True, False]
    assert batch[CHAIN_CORRECT].dtype == torch.bool and batch["labels"].dtype == torch.float32
    plain = collate([{k: v for k, v in f.items() if k not in ("group", "correct")} for f in features])
    assert set(plain) == {"input_ids", "attention_mask", "labels"}


def test_batch_count_is_the_same_for_every_shuffle():
    groups = [g for g, n in enumerate([5, 3, 3, 2, 1, 1, 6, 2]) for _ in range(n)]
    correct = [i % 3 == 0 for i in range(len(groups))]
    counts = Counter(len(SiblingBatchSampler(groups, correct, 5, seed)) for seed in range(20))
    assert len(counts) == 1
    sampler = SiblingBatchSampler(groups, correct, 5, seed=1)
    assert all(len(epoch_batches(sampler, epoch)) == len(sampler) for epoch in range(10))


def test_tokenized_chains_name_the_record_they_came_from_past_dropped_rows(tokenizer):
    records = [record("A", [1.0]), record("B", [None]), record("C", [0.0])]  # B has no labelled step: dropped
    chains, stats = tokenize_records(tokenizer, records, separator="\n\n", max_length=64)
    assert stats.rows_dropped == 1 and [c.record_index for c in chains] == [0, 2]
    assert sibling_groups(records, "t.jsonl", chains).correct == [True, False]
