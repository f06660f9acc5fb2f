"""Padding-free batches: packed and padded batches give the same loss and gradients, and training runs match."""

import json

import pytest
import torch

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.loss import step_loss
from prmkit.model import load_token_classifier, load_tokenizer
from prmkit.tokenize import StepCollator, tokenize_records
from prmkit.training.packing import REAL_TOKENS, PackedStepCollator, check_packing_supported
from prmkit.training.trainer import train


def chains_for(model_dir, count=5):
    tokenizer = load_tokenizer(str(model_dir))
    chains, _ = tokenize_records(tokenizer, generate_records(count, seed=4), separator="\n\n", max_length=256)
    return tokenizer, [{"input_ids": c.input_ids, "labels": c.labels} for c in chains]


def test_packed_collator_fills_rows_up_to_the_longest_chain_with_restarting_positions():
    chains = [{"input_ids": [1, 2], "labels": [-100.0, 1.0]},
              {"input_ids": [3, 4, 5, 6, 7], "labels": [-100.0, -100.0, 1.0, -100.0, 0.0]},
              {"input_ids": [8, 9, 10], "labels": [-100.0, -100.0, 1.0]},
              {"input_ids": [11, 12], "labels": [-100.0, 0.0]}]
    batch = PackedStepCollator(pad_token_id=0)(chains)
    # longest first, first fit into rows of 5: [3..7], then [8, 9, 10] + [1, 2], then [11, 12] + 3 padding
    assert batch["input_ids"].tolist() == [[3, 4, 5, 6, 7], [8, 9, 10, 1, 2], [11, 12, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 0, 1], [0, 1, 0, 1, 2]]
    assert batch["labels"].tolist() == [[-100.0, -100.0, 1.0, -100.0, 0.0], [-100.0, -100.0, 1.0, -100.0, 1.0],
                                        [-100.0, 0.0, -100.0, -100.0, -100.0]]
    assert batch[REAL_TOKENS].item() == 12 and "attention_mask" not in batch
    one_row = PackedStepCollator(max_row_tokens=100)(chains)
    assert one_row["input_ids"].shape == (1, 12)


@pytest.mark.parametrize("kind", ["tiny_llama", "tiny_gpt2"])
def test_packed_and_padded_batches_give_the_same_loss_and_gradients(kind, request):
    model_dir = request.getfixturevalue(kind)
    tokenizer, features = chains_for(model_dir)
    assert len({len(f["input_ids"]) for f in features}) > 1  # uneven lengths, so the padded batch has padding
    results = []
    for collator in (StepCollator(tokenizer.pad_token_id), PackedStepCollator(tokenizer.pad_token_id),
                     PackedStepCollator(tokenizer.pad_token_id, max_row_tokens=10_000)):
        torch.manual_seed(0)  # the same random head for both
        model = load_token_classifier(str(model_dir))
        model.config.pad_token_id = tokenizer.pad_token_id
        batch = collator(features)
        labels = batch.pop("labels")
        batch.pop(REAL_TOKENS, None)
        loss = step_loss("bce", model(**batch).logits.squeeze(-1), labels)
        loss.backward()
        results.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    padded_loss, padded_grads = results[0]
    for packed_loss, packed_grads in results[1:]:  # rows of the longest chain, and the whole batch in one row
        assert packed_loss == pytest.approx(padded_loss, rel=1e-5)
        assert padded_grads.keys() == packed_grads.keys()
        for name in padded_grads:
            torch.testing.assert_close(packed_grads[name], padded_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_model_that_reads_across_packed_chains_is_refused(tiny_llama):
    tokenizer, _ = chains_for(tiny_llama)
    chains, _ = tokenize_records(tokenizer, generate_records(3, seed=4), separator="\n\n", max_length=256)
    model = load_token_classifier(str(tiny_llama))
    check_packing_supported(model, chains, tokenizer.pad_token_id)  # supported: no error
    model.config.use_cache = True  # with a KV cache transformers no longer sees the chains as packed
    with pytest.raises(PRMError, match="does not keep packed chains apart"):
        check_packing_supported(model, chains, tokenizer.pad_token_id)


def test_packed_training_follows_padded_training(tiny_llama, tmp_path):
    records = generate_records(32, seed=6)
    for record in records[::2]:  # short and long chains, so some pairs fit in one row
        record["completions"], record["labels"] = record["completions"][:1], record["labels"][:1]
    write_jsonl(records, tmp_path / "train.jsonl")
    runs = {}
    for packing in (False, True):
        name = f"packing-{packing}"
        summary = train(load_config(None, [
            f"model.base={tiny_llama}", f"data.train={tmp_path / 'train.jsonl'}", "data.max_length=500",
            f"output_dir={tmp_path}", f"run_name={name}", "training.max_steps=4", "training.batch_size=4",
            "training.logging_steps=1", "training.lr=5e-3", "lora.dropout=0.0", f"training.packing={packing}",
            "training.group_by_length=false"]))  # random batches: mixed lengths, where packing has padding to remove
        state = json.loads((tmp_path / name / "trainer_state.json").read_text())
        runs[packing] = ([e["loss"] for e in state["log_history"] if "loss" in e], summary)
    assert runs[True][0] == pytest.approx(runs[False][0], rel=1e-4)
    assert runs[True][1].trained_tokens == runs[False][1].trained_tokens
    assert runs[True][1].padding_share < runs[False][1].padding_share


def half_only_attention(module, query, key, value, attention_mask, **kwargs):
    """flash-attention's contract on CPU: fp32 inputs are cast to the autocast dtype when autocast is on, and to the
    weights' dtype otherwise (transformers' own rule), and the kernel refuses anything but bf16/fp16."""
    from transformers.integrations.flash_attention import get_target_dtype
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    dtype = get_target_dtype(query, module) or query.dtype
    if dtype not in (torch.bfloat16, torch.float16):
        raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
    query, key, value = (t.to(dtype) for t in (query, key, value))
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


@pytest.mark.parametrize("head_init, packing", [("probe", False), ("random", True)])
def test_probe_and_packing_check_run_in_the_precision_training_runs_in(head_init, packing, tiny_llama, tmp_path):
    """The probe's forward and the packing check run before the engine's autocast starts; with fp32 weights and an
    attention that reads bf16/fp16 only (flash-attention) they must take the run's autocast too."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register("half_only", half_only_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register("half_only", sdpa_mask)
    write_jsonl(generate_records(16, seed=6), tmp_path / "train.jsonl")
    summary = train(load_config(None, [
        f"model.base={tiny_llama}", f"data.train={tmp_path / 'train.jsonl'}", "data.max_length=256",
        f"output_dir={tmp_path}", "run_name=half", "precision=bf16", "model.attn_implementation=half_only",
        f"training.head_init={head_init}", "training.head_init_rows=8", f"training.packing={packing}",
        "training.max_steps=1", "training.batch_size=4"]))
    assert summary.optimizer_steps == 1
