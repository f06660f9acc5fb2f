"""End to end on a tiny model built from a config: train, checkpoint, resume, export, reload without prmkit."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForTokenClassification, AutoTokenizer

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.files import write_jsonl
from prmkit.scoring.export import export_merged
from prmkit.scoring.scorer import PRMScorer
from prmkit.tokenize import tokenize_chain
from prmkit.training.trainer import train


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_jsonl(generate_records(48, seed=1), folder / "train.jsonl")
    write_jsonl(generate_records(12, seed=2), folder / "val.jsonl")
    return folder


def make_config(model_dir, data, out, *overrides):
    return load_config(None, [
        f"model.base={model_dir}", f"data.train={data / 'train.jsonl'}", f"data.val={data / 'val.jsonl'}",
        "data.max_length=256", f"output_dir={out}", "run_name=run", "training.max_steps=6",
        "training.batch_size=4", "training.save_steps=3", "training.logging_steps=1", "training.lr=5e-3",
        "lora.r=4", "lora.dropout=0.0", *overrides])


@pytest.fixture(scope="module")
def lora_run(tiny_llama, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    summary = train(make_config(tiny_llama, data, out))
    return out / "run", summary


def test_run_folder_and_summary(lora_run):
    run, summary = lora_run
    for folder in (run, run / "checkpoint-3", run / "checkpoint-6"):
        for name in ("adapter_model.safetensors", "adapter_config.json", "prmkit.json", "tokenizer.json"):
            assert (folder / name).is_file(), folder / name
    meta = json.loads((run / "prmkit.json").read_text())
    assert meta["separator"] == "\n\n" and meta["loss"] == "bce" and meta["max_length"] == 256
    saved = json.loads((run / "summary.json").read_text())
    assert saved["optimizer_steps"] == summary.optimizer_steps == 6
    assert saved["initial_loss"] is not None and saved["final_loss"] is not None
    assert saved["trained_tokens"] > 0 and saved["tokens_per_s"] > 0
    assert {"loss", "accuracy", "auroc"} <= set(saved["eval_metrics"])
    # the head is saved with the adapter (modules_to_save), not left at its random init
    weights = load_file(run / "adapter_model.safetensors")
    assert any("score" in k for k in weights) and any("lora_A" in k for k in weights)
    assert 0 < saved["trainable_params"] < saved["total_params"]


def test_existing_run_folder_is_not_overwritten(lora_run, tiny_llama, data):
    run, _ = lora_run
    from prmkit.errors import PRMError
    with pytest.raises(PRMError, match="already holds files"):
        train(make_config(tiny_llama, data, run.parent))


def test_intermediate_checkpoint_scores_on_its_own(lora_run, tiny_llama):
    run, _ = lora_run
    prompt, steps = "What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]
    scores = PRMScorer.from_pretrained(run / "checkpoint-3", device="cpu").score(prompt, steps)

    def by_hand(folder):
        """The base model with the folder's adapter and head put on by peft itself, read at the step positions."""
        from peft import PeftModel

        tokenizer = AutoTokenizer.from_pretrained(folder)
        base = AutoModelForTokenClassification.from_pretrained(tiny_llama, num_labels=1, dtype=torch.float32)
        base.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        model = PeftModel.from_pretrained(base, str(folder)).eval()
        chain = tokenize_chain(tokenizer, prompt, steps, None, separator="\n\n", max_length=256)
        with torch.no_grad():
            head = model(input_ids=torch.tensor([chain.input_ids])).logits[0, :, 0]
        return torch.sigmoid(head[chain.step_positions]).tolist()

    assert scores == pytest.approx(by_hand(run / "checkpoint-3"), abs=1e-5)
    # and those weights are checkpoint-3's own, not the end of the run's
    assert max(abs(a - b) for a, b in zip(scores, by_hand(run / "checkpoint-6"))) > 1e-3


def test_resume_continues_to_the_same_weights(lora_run, tiny_llama, data, tmp_path):
    run, _ = lora_run
    interrupted = tmp_path / "run"
    shutil.copytree(run, interrupted)
    # as if the process died after checkpoint-3: only that checkpoint survives
    shutil.rmtree(interrupted / "checkpoint-6")
    for name in ("adapter_model.safetensors", "summary.json", "prmkit.json"):
        (interrupted / name).unlink()
    summary = train(make_config(tiny_llama, data, tmp_path, "training.resume=latest"))
    assert summary.optimizer_steps == 6 and summary.resumed_from.endswith("checkpoint-3")
    expected = load_file(run / "adapter_model.safetensors")
    resumed = load_file(interrupted / "adapter_model.safetensors")
    assert expected.keys() == resumed.keys()
    for key in expected:
        torch.testing.assert_close(resumed[key], expected[key], rtol=1e-5, atol=1e-6)


def test_merged_export_scores_the_same_with_plain_transformers(lora_run, tmp_path):
    run, _ = lora_run
    out = export_merged(run, tmp_path / "merged")
    prompt, steps = "Tom has 3 bags of 4 apples. How many apples?", ["3 * 4 = 12.", "He has 12 apples."]
    expected = PRMScorer.from_pretrained(run, device="cpu").score(prompt, steps)

    # plain transformers: no prmkit model code, only the documented layout and config fields
    model = AutoModelForTokenClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.num_labels == 1 and model.config.prm_score == "sigmoid(logits)"
    sep = model.config.prm_separator
    ids = [tokenizer.bos_token_id] + tokenizer(prompt + sep, add_special_tokens=False)["input_ids"]
    positions = []
    for step in steps:
        step_ids = tokenizer(step, add_special_tokens=False)["input_ids"]
        ids += step_ids + tokenizer(sep, add_special_tokens=False)["input_ids"]
        positions.append(len(ids) - 1)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :, 0]
    plain = torch.sigmoid(logits[positions]).tolist()
    assert plain == pytest.approx(expected, abs=1e-5)
    # and prmkit's own loader reads the export too
    assert PRMScorer.from_pretrained(out, device="cpu").score(prompt, steps) == pytest.approx(expected, abs=1e-5)


def test_full_finetune_trains_every_weight_and_exports(tiny_llama, data, tmp_path):
    summary = train(load_config(None, [
        f"model.base={tiny_llama}", f"data.train={data / 'train.jsonl'}", "data.max_length=256",
        f"output_dir={tmp_path}", "run_name=full", "training.max_steps=2", "training.batch_size=4",
        "model.finetune=full"]))
    assert summary.trainable_params == summary.total_params
    run = tmp_path / "full"
    assert (run / "model.safetensors").is_file() and not (run / "adapter_config.json").exists()
    out = export_merged(run, tmp_path / "merged")
    chain = ("q?", ["1 + 1 = 2."])
    a = PRMScorer.from_pretrained(run, device="cpu").score(*chain)
    b = PRMScorer.from_pretrained(out, device="cpu").score(*chain)
    assert a == pytest.approx(b, abs=1e-6)


def uneven_chains(folder):
    """Rows with 1 to 7 labelled steps, so micro-batches hold different numbers of steps."""
    rows = [{"prompt": f"What is {i} + {i}?", "completions": [f"{i} + {i} = {2 * i}."] * (1 + i % 7),
             "labels": [(i + k) % 3 != 0 for k in range(1 + i % 7)]} for i in range(16)]
    write_jsonl(rows, folder / "uneven.jsonl")
    return folder / "uneven.jsonl"


def grad_norm_and_loss_after_one_step(tiny_llama, train_file, out, batch_size, accumulation):
    summary = train(load_config(None, [
        f"model.base={tiny_llama}", f"data.train={train_file}", "data.max_length=256",
        f"output_dir={out}", f"run_name=ga{accumulation}", "training.max_steps=1", "training.logging_steps=1",
        f"training.batch_size={batch_size}", f"training.gradient_accumulation_steps={accumulation}",
        "lora.dropout=0.0"]))
    log = json.loads((out / f"ga{accumulation}" / "trainer_state.json").read_text())["log_history"]
    return log[0]["loss"], log[0]["grad_norm"], summary


def test_gradient_accumulation_matches_one_big_batch(tiny_llama, data, tmp_path):
    # micro-batches hold different step counts: a mean of per-batch means would differ from the big batch's
    # mean; normalising by the accumulated step count must not
    train_file = uneven_chains(tmp_path)
    loss_big, grad_big, _ = grad_norm_and_loss_after_one_step(tiny_llama, train_file, tmp_path, 8, 1)
    loss_acc, grad_acc, _ = grad_norm_and_loss_after_one_step(tiny_llama, train_file, tmp_path, 2, 4)
    assert loss_acc == pytest.approx(loss_big, rel=1e-4)
    assert grad_acc == pytest.approx(grad_big, rel=1e-4)


def test_group_by_length_cuts_padding(tiny_llama, tmp_path):
    # chains of two very different lengths: random batches mix them, length-grouped batches mostly do not
    # (transformers sorts by length within mega-batches of up to 50 batches, at most a quarter of the data)
    steps = [1 + 6 * (i % 2) for i in range(160)]
    rows = [{"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2."] * n, "labels": [1] * n} for n in steps]
    write_jsonl(rows, tmp_path / "mixed.jsonl")
    shares = {}
    for grouped in (False, True):
        summary = train(load_config(None, [
            f"model.base={tiny_llama}", f"data.train={tmp_path / 'mixed.jsonl'}", "data.max_length=256",
            f"output_dir={tmp_path}", f"run_name=g{grouped}", "training.max_steps=4", "training.batch_size=8",
            f"training.group_by_length={str(grouped).lower()}"]))
        shares[grouped] = summary.padding_share
    assert shares[False] > 0.2
    assert shares[True] < shares[False] / 2


def test_a_backbone_cut_to_its_first_layers_trains_reloads_and_exports(tiny_llama, data, tmp_path):
    train(make_config(tiny_llama, data, tmp_path, "model.num_layers=1", "training.max_steps=2"))
    run = tmp_path / "run"
    assert json.loads((run / "prmkit.json").read_text())["num_layers"] == 1
    scorer = PRMScorer.from_pretrained(run, device="cpu", merge_adapter=False)
    assert len(scorer.model.base_model.model.model.layers) == 1  # the LoRA base is cut again on load
    chain = ("Tom has 3 bags of 4 apples. How many apples?", ["3 * 4 = 12.", "He has 12 apples."])
    out = export_merged(run, tmp_path / "merged")
    plain = AutoModelForTokenClassification.from_pretrained(out)
    assert plain.config.num_hidden_layers == 1 and len(plain.model.layers) == 1
    assert PRMScorer.from_pretrained(out, device="cpu").score(*chain) == pytest.approx(scorer.score(*chain), abs=1e-5)
