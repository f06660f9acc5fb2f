"""Keys and values kept across `score_many` calls (PRMScorer.kept_caches, prmkit.scoring.kv_store): over rounds
shaped like a tree search's (beams branching from one parent, beams that end, a chain that shares nothing, a chain
scored again whole), scores equal a full pass of every chain to 1e-5 in fp32 on a Llama-style and a GPT-2-style
PRM, and a later round reads only its new steps; with a budget too small to keep every chain, evicted chains are
read again and scores stay right; outside the block, or where nothing can be kept, scoring is as it was."""

from __future__ import annotations

import pytest
import torch
from forward_counts import tokens_read
from tiny_models import build_tokenizer
from transformers import AutoModelForTokenClassification, LlamaConfig, Qwen2Config

from prmkit.errors import PRMError
from prmkit.scoring.kv_store import KVStore, keeps_full_attention
from prmkit.scoring.prefix import KeptChain, forward_after, read_prefix
from prmkit.scoring.scorer import PRMScorer

TOL = 1e-5
PROMPT = "Compute 3 + 4 * 2 - 5, step by step."
OTHER = "Add 5 and 6."


@pytest.fixture(params=["llama", "gpt2"])
def scorer(request, tiny_run, tiny_gpt2_run):
    run = tiny_run if request.param == "llama" else tiny_gpt2_run
    return PRMScorer.from_pretrained(run, device="cpu", batch_size=3)


def search_rounds() -> list[list[tuple[str, list[str]]]]:
    """Three rounds of one search over two problems. Round 1: four children of the root. Round 2: two children of
    each of two round-1 beams (the others ended, or were pruned), a chain that shares nothing, and a third beam
    whose new step is its only one. Round 3: children of three round-2 beams, and a round-2 beam again whole."""
    first = [["4 * 2 = 8."], ["3 + 4 = 7."], ["4 * 2 = 8 so 3 + 8 = 11."], ["We compute 4 * 2 first."]]
    second = [first[0] + ["3 + 8 = 11."], first[0] + ["8 + 3 = 11."], first[1] + ["7 * 2 = 14."],
              first[1] + ["7 * 2 = 14, then 14 - 5 = 9."]]
    third = [second[0] + ["11 - 5 = 6."], second[0] + ["The answer is 6."], second[2] + ["14 - 5 = 9."],
             second[3] + ["The answer is 9."]]  # a longer parent than the others: starts of unequal length
    return [[(PROMPT, s) for s in first],
            [(PROMPT, s) for s in second] + [(OTHER, ["5 + 6 = 11."]), (PROMPT, ["Let 4 * 2 = 8 first."])],
            [(PROMPT, s) for s in third] + [(PROMPT, second[3]), (OTHER, ["5 + 6 = 11.", "The answer is 11."])]]


def rounds_read(scorer, rounds) -> tuple[list, list[int]]:
    scored = [tokens_read(scorer, chains) for chains in rounds]
    return [scores for scores, _ in scored], [tokens for _, tokens in scored]


def assert_scores_equal(got: list, want: list) -> None:
    assert [len(s) for s in got] == [len(s) for s in want]
    for g, w in zip(got, want):
        assert [x is None for x in g] == [x is None for x in w]
        assert [x for x in g if x is not None] == pytest.approx([x for x in w if x is not None], abs=TOL)


def full_pass(scorer, rounds) -> tuple[list, list[int]]:
    scorer.reuse_prefix = False
    try:
        return rounds_read(scorer, rounds)
    finally:
        scorer.reuse_prefix = True


def test_rounds_with_kept_caches_equal_a_full_pass_and_read_only_new_steps(scorer):
    rounds = search_rounds()
    full, _ = full_pass(scorer, rounds)
    within_call, within_tokens = rounds_read(scorer, rounds)  # shared prefixes inside each call only
    with scorer.kept_caches() as store:
        kept, kept_tokens = rounds_read(scorer, rounds)
        assert len(store) > 0 and store.bytes > 0
    for got, want in zip(kept + within_call, full + full):
        assert_scores_equal(got, want)
    assert kept_tokens[0] == within_tokens[0]  # nothing kept yet: the first round reads what it did
    # Round 2 runs each child's new step on its parent; the chain of another prompt and the lone beam run whole.
    new_steps = sum(len(scorer.tokenize(p, s).input_ids) - len(scorer.tokenize(p, s[:-1]).input_ids)
                    for p, s in rounds[1][:4])
    alone = sum(len(scorer.tokenize(p, s).input_ids) for p, s in rounds[1][4:])
    assert kept_tokens[1] < within_tokens[1]
    assert kept_tokens[1] <= 2 * new_steps + alone  # padding at most doubles a batch
    assert kept_tokens[2] < within_tokens[2]
    assert scorer._kept is None  # freed when the block ends


def test_rows_after_kept_chains_of_unequal_length_run_in_one_batch(scorer):
    """Each row's kept chain right-aligned in the batch's cache (the gap before a shorter one masked), its positions
    going on from its own length: the scores equal a full pass."""
    chains = [(PROMPT, ["4 * 2 = 8.", "3 + 8 = 11."]), (PROMPT, ["3 + 4 = 7.", "7 * 2 = 14, then 14 - 5 = 9."]),
              (OTHER, ["5 + 6 = 11."])]
    children = [(p, s + ["The answer is 6."]) for p, s in chains]
    full, _ = full_pass(scorer, [children])
    ids = [scorer.tokenize(p, s).input_ids for p, s in children]
    with torch.inference_mode():
        starts = [read_prefix(scorer.model, scorer.tokenize(p, s).input_ids, "cpu", scorer._head_scores)
                  for p, s in chains]
        output, _, width = forward_after(scorer.model, starts, [i[len(s):] for i, s in zip(ids, starts)],
                                         scorer.tokenizer.pad_token_id, "cpu")
    assert len({len(start) for start in starts}) == 3 and width == max(len(s) for s in starts)
    scores = scorer._head_scores(output)
    for row, (start, chain) in enumerate(zip(starts, children)):
        step_end = scorer.tokenize(*chain).step_positions[-1]
        assert scores[row, step_end - len(start)].item() == pytest.approx(full[0][row][-1], abs=TOL)


def test_a_chain_kept_whole_is_answered_without_reading_it_again(scorer):
    chains = search_rounds()[1]
    with scorer.kept_caches():
        first, _ = tokens_read(scorer, chains)
        again, tokens = tokens_read(scorer, chains)
    assert tokens == 0
    assert_scores_equal(again, first)


def test_a_budget_too_small_for_every_chain_drops_some_and_scores_stay_right(scorer):
    rounds = search_rounds()
    full, _ = full_pass(scorer, rounds)
    with scorer.kept_caches() as store:
        _, roomy_tokens = rounds_read(scorer, rounds)
        one_chain = max(chain.nbytes for chain in store._chains.values())
        kept_all = len(store)
    with scorer.kept_caches(max_mb=1.5 * one_chain / 2 ** 20) as store:  # room for the longest chain, not two
        tight, tight_tokens = rounds_read(scorer, rounds)
        assert store.dropped > 0 and len(store) < kept_all and store.peak_bytes <= store.max_bytes
    for got, want in zip(tight, full):
        assert_scores_equal(got, want)
    assert sum(tight_tokens) > sum(roomy_tokens)  # what was dropped is read again


def test_outside_the_block_or_with_reuse_prefix_off_nothing_is_kept(scorer):
    rounds = search_rounds()
    _, before = rounds_read(scorer, rounds)
    with scorer.kept_caches():
        rounds_read(scorer, rounds)
    _, after = rounds_read(scorer, rounds)
    assert after == before
    scorer.reuse_prefix = False
    try:
        with scorer.kept_caches() as store:
            assert store is None
            scorer.score_many(rounds[0])
            assert scorer._kept is None
    finally:
        scorer.reuse_prefix = True


def test_a_block_inside_another_goes_on_using_the_outer_store(scorer):
    with scorer.kept_caches() as outer:
        with scorer.kept_caches(max_mb=1) as inner:
            assert inner is outer
            scorer.score_many(search_rounds()[0])
        assert scorer._kept is outer and len(outer) == 4
    with pytest.raises(PRMError, match="max_mb=0"):
        with scorer.kept_caches(max_mb=0):
            pass


def test_only_models_whose_layers_keep_every_token_are_kept():
    tokenizer = build_tokenizer()
    common = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, num_labels=1, pad_token_id=tokenizer.pad_token_id)
    plain = AutoModelForTokenClassification.from_config(LlamaConfig(**common))
    sliding = AutoModelForTokenClassification.from_config(
        Qwen2Config(**common, use_sliding_window=True, sliding_window=8, max_window_layers=0))
    assert keeps_full_attention(plain)
    assert not keeps_full_attention(sliding)


def chain(ids: list[int], nbytes: int = 1024) -> KeptChain:
    values = torch.zeros(nbytes // 4)  # fp32: keys and values of half the bytes each, and no scores
    return KeptChain(tuple(ids), [values[: len(values) // 2]], [values[len(values) // 2:]], torch.zeros(0))


def test_the_store_finds_the_longest_kept_prefix_and_drops_the_least_recently_used():
    store = KVStore(max_mb=3.5 * 1024 / 2 ** 20)  # three chains of 1 KiB
    for ids in ([1, 2], [1, 2, 3, 4], [1, 2, 3], [9]):
        store.add(chain(ids))
    assert len(store) == 3 and store.dropped == 1 and store.bytes == 3 * 1024  # [1, 2] went first
    assert store.longest_prefix([1, 2, 3, 4, 5]).ids == (1, 2, 3, 4)
    assert store.longest_prefix([1, 2, 3]).ids == (1, 2, 3)  # the chain itself counts
    assert store.longest_prefix([1, 2]) is None and store.longest_prefix([7, 1]) is None
    store.add(chain([5]))  # [9] is now the least recently used: both lookups above touched theirs
    assert store.longest_prefix([9]) is None and store.longest_prefix([1, 2, 3]) is not None
    store.add(chain([1, 2, 3], 2048))  # the same ids again replaces the old chain
    assert len(store) == 2 and store.bytes == 3 * 1024 and store.peak_bytes == 3 * 1024
    store.add(chain([8], 8192))  # larger than the whole budget: not kept, nothing else dropped for it
    assert store.longest_prefix([8]) is None and len(store) == 2
