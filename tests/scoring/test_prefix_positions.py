"""Prefix reuse on models whose positions have a hard or a moving limit, and on models whose cache it cannot run on
from. Groups with different shared-prefix lengths share one batch of continuations (a long shared prefix with a
short continuation beside a short prefix with a long one): the padding after a short continuation must not take
positions past what its row's real tokens use, or a GPT-2-style PRM whose position table just fits max_length
raises IndexError, and dynamic or longrope RoPE scaling (chosen by the largest position in a pass) changes the real
tokens' scores. Scores equal `reuse_prefix=False` to 1e-5 in fp32. A model with sliding-window or linear-attention
cache layers reads every chain whole, and says why once."""

from __future__ import annotations

import pytest
import torch
from forward_counts import tokens_read
from tiny_models import build_tokenizer
from transformers import AutoModelForTokenClassification, GPT2Config, LlamaConfig, Qwen2Config, Qwen3NextConfig

from prmkit.model import PRMMetadata
from prmkit.scoring.kv_store import keeps_full_attention
from prmkit.scoring.prefix import shared_prefix_groups
from prmkit.scoring.scorer import PRMScorer

TOL = 1e-5
MAX_LENGTH = 64
TOM = "Tom has 3 apples and buys 12 more, so he has 3 + 12 = 15 apples."
PENS = "She sells 4 boxes of 6 pens, so she sells 4 * 6 = 24 pens."
RECTANGLE = "A rectangle is 3 by 8, so its area is 3 * 8 = 24."
SHARED = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              initializer_range=0.3)  # weights large enough that a change of RoPE frequencies moves the scores


def configs(tokenizer) -> dict:
    common = dict(vocab_size=len(tokenizer), num_labels=1, pad_token_id=tokenizer.pad_token_id)
    # dynamic NTK: frequencies rescaled once a pass's largest position passes max_position_embeddings
    dynamic = LlamaConfig(**SHARED, **common, max_position_embeddings=MAX_LENGTH,
                          rope_parameters={"rope_type": "dynamic", "factor": 8.0, "rope_theta": 10000.0})
    # longrope: the long factors once a pass's largest position passes original_max_position_embeddings
    longrope = LlamaConfig(**SHARED, **common, max_position_embeddings=4 * MAX_LENGTH, rope_parameters={
        "rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": MAX_LENGTH,
        "short_factor": [1.0] * 4, "long_factor": [8.0] * 4})
    gpt2 = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=MAX_LENGTH, **common)  # positions 0..63 only
    return {"gpt2": gpt2, "llama-dynamic-rope": dynamic, "llama-longrope": longrope}


def tiny_scorer(config, tokenizer, **kwargs) -> PRMScorer:
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_config(config)
    metadata = PRMMetadata(base_model="tiny", base_path="tiny", finetune="full", loss="bce", separator="\n\n",
                           max_length=MAX_LENGTH)
    return PRMScorer(model, tokenizer, metadata, device="cpu", batch_size=8, **kwargs)


def mixed_groups() -> list[tuple[str, list[str]]]:
    """Two chains that share a long prompt and first step and end in a short step each; two that share only a
    short prompt and go on for longer."""
    return [(TOM + " " + PENS, ["The answer is 42.", "Each friend gets 20 / 4 = 5 cookies."]),
            (TOM + " " + PENS, ["The answer is 42.", "Step 1: 7 - 2 = 5."]),
            (TOM, [PENS, "The answer is 42."]), (TOM, [RECTANGLE, "Step 1: 7 - 2 = 5."])]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.parametrize("name", ["gpt2", "llama-dynamic-rope", "llama-longrope"])
def test_groups_of_unequal_prefix_length_in_one_batch_score_as_a_full_pass(tokenizer, name):
    scorer = tiny_scorer(configs(tokenizer)[name], tokenizer)
    chains = mixed_groups()
    tokenized = [scorer.tokenize(p, s) for p, s in chains]
    assert all(len(t.input_ids) <= MAX_LENGTH and not t.steps_dropped for t in tokenized)  # every chain fits
    groups, rest = shared_prefix_groups(tokenized, [0, 1, 2, 3], [p for p, _ in chains])
    assert rest == [] and len(groups) == 2
    (long_start, _), (short_start, short_members) = sorted(groups, reverse=True)
    longest_continuation = max(len(tokenized[i].input_ids) - short_start for i in short_members)
    assert long_start + longest_continuation > MAX_LENGTH  # counted on, the long start's padding would pass it
    scorer.reuse_prefix = False
    full, _ = tokens_read(scorer, chains)
    scorer.reuse_prefix = True
    rows = []
    hook = scorer.model.register_forward_pre_hook(
        lambda module, args, kwargs: rows.append(len(kwargs["input_ids"])), with_kwargs=True)
    try:
        reused = scorer.score_many(chains)
    finally:
        hook.remove()
    assert rows == [1, 1, 4]  # each group's prefix, then every continuation in one batch
    for want, got in zip(full, reused):
        assert got == pytest.approx(want, abs=TOL)


def not_full_attention_configs(tokenizer) -> dict:
    common = dict(**SHARED, vocab_size=len(tokenizer), num_labels=1, pad_token_id=tokenizer.pad_token_id)
    sliding = Qwen2Config(**common, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    linear = Qwen3NextConfig(**common, layer_types=["linear_attention", "full_attention"], head_dim=8,
                             linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
                             linear_value_head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                             shared_expert_intermediate_size=16)
    return {"sliding-window": (sliding, "DynamicSlidingWindowLayer"), "linear-attention": (linear,
                                                                                           "LinearAttentionLayer")}


@pytest.mark.parametrize("name", ["sliding-window", "linear-attention"])
def test_a_cache_that_does_not_keep_every_token_turns_prefix_reuse_off_and_says_why_once(tokenizer, name, capsys):
    config, layer = not_full_attention_configs(tokenizer)[name]
    chains = mixed_groups()
    whole = tiny_scorer(config, tokenizer, reuse_prefix=False)
    assert capsys.readouterr().err == ""  # not asked for: nothing to say
    want, want_tokens = tokens_read(whole, chains)
    scorer = tiny_scorer(config, tokenizer)
    assert not keeps_full_attention(scorer.model) and scorer.reuse_prefix is False
    said = capsys.readouterr().err
    assert "reuse_prefix is off for this model" in said and layer in said and said.count("\n") == 1
    scorer.reuse_prefix = True  # asked again: still off, said once already
    assert scorer.reuse_prefix is False and capsys.readouterr().err == ""
    got, got_tokens = tokens_read(scorer, chains)
    assert got_tokens == want_tokens  # every chain read whole
    for w, g in zip(want, got):
        assert g == pytest.approx(w, abs=TOL)
    with scorer.kept_caches() as store:
        assert store is None


def test_a_full_attention_model_keeps_prefix_reuse_without_a_note(tokenizer, capsys):
    scorer = tiny_scorer(configs(tokenizer)["llama-dynamic-rope"], tokenizer)
    assert scorer.reuse_prefix is True and capsys.readouterr().err == ""
