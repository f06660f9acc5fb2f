"""training.head_init=probe: the head starts as a linear probe fitted on the frozen backbone's step features."""

import json

import pytest
import torch
from safetensors.torch import load_file

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.evaluation.metrics import auroc
from prmkit.files import write_jsonl
from prmkit.training.head_init import fit_linear_head
from prmkit.training.trainer import train


def badly_scaled_problem(n=600, dim=12, seed=0):
    """Labels from a linear rule on features whose scales differ by 10^4, as hidden states' dimensions do."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=generator)
    rule = torch.randn(dim, generator=generator)
    labels = (x @ rule + 0.3 * torch.randn(n, generator=generator) > 0).float()
    scales = torch.logspace(-2, 2, dim)
    return x * scales + 5.0, labels  # shifted too: the bias must absorb the mean


def test_logistic_probe_separates_classes_in_the_original_feature_scale():
    features, labels = badly_scaled_problem()
    weight, bias = fit_linear_head(features, labels, "bce")
    logits = features @ weight + bias
    assert auroc(logits.tolist(), labels.tolist()) > 0.97
    accuracy = ((logits > 0).float() == labels).float().mean().item()
    assert accuracy > 0.9


def test_ridge_probe_matches_least_squares_when_unregularised():
    features, labels = badly_scaled_problem(seed=1)
    weight, bias = fit_linear_head(features, labels, "mse", l2=0.0)
    design = torch.cat([features, torch.ones(len(features), 1)], dim=1).double()
    expected = torch.linalg.lstsq(design, labels.double().unsqueeze(1)).solution[:, 0]
    torch.testing.assert_close(weight.double(), expected[:-1], rtol=1e-3, atol=1e-4)
    assert bias.item() == pytest.approx(expected[-1].item(), abs=1e-3)


def test_training_starts_from_the_probe_with_a_lower_loss(tiny_llama, tmp_path, capsys):
    write_jsonl(generate_records(48, seed=9), tmp_path / "train.jsonl")
    first_loss = {}
    for init in ("random", "probe"):
        train(load_config(None, [
            f"model.base={tiny_llama}", f"data.train={tmp_path / 'train.jsonl'}", "data.max_length=256",
            f"output_dir={tmp_path}", f"run_name={init}", "training.max_steps=1", "training.batch_size=8",
            "training.logging_steps=1", f"training.head_init={init}", "lora.dropout=0.0"]))
        state = json.loads((tmp_path / init / "trainer_state.json").read_text())
        first_loss[init] = next(e["loss"] for e in state["log_history"] if "loss" in e)  # before any update
    assert first_loss["probe"] < first_loss["random"] - 0.02, first_loss
    assert "head fitted as a linear probe on" in capsys.readouterr().out


def test_head_lr_moves_the_head_less_and_the_summary_shows_the_starting_head(tiny_llama, tmp_path):
    """training.head_lr puts the head in an optimizer group of its own; with a validation file, a probe run reports
    the held-out metrics of its starting head beside the trained one."""
    write_jsonl(generate_records(32, seed=9), tmp_path / "train.jsonl")
    write_jsonl(generate_records(8, seed=10), tmp_path / "val.jsonl")
    moved = {}
    for name, head_lr in (("same", None), ("slow", 1e-6)):
        overrides = [f"model.base={tiny_llama}", f"data.train={tmp_path / 'train.jsonl'}", "data.max_length=256",
                     f"data.val={tmp_path / 'val.jsonl'}", f"output_dir={tmp_path}", f"run_name={name}",
                     "training.max_steps=3", "training.batch_size=8", "training.lr=1e-2", "training.head_init=probe",
                     "training.logging_steps=1"] + ([f"training.head_lr={head_lr}"] if head_lr else [])
        summary = train(load_config(None, overrides))
        head = load_file(tmp_path / name / "adapter_model.safetensors")
        start = summary.start_eval_metrics
        assert set(start) >= {"loss", "auroc"} and start["loss"] != summary.eval_metrics["loss"]
        moved[name] = head
    key = next(k for k in moved["same"] if "score" in k and k.endswith("weight"))
    fitted = fit_again(tiny_llama, tmp_path)
    distance = {name: (weights[key].flatten() - fitted).abs().max().item() for name, weights in moved.items()}
    assert distance["slow"] < 1e-4 < distance["same"], distance


def fit_again(tiny_llama, tmp_path) -> torch.Tensor:
    """The probe head training started from (the fit is deterministic)."""
    from prmkit.data.io import load_records
    from prmkit.model import load_token_classifier, load_tokenizer
    from prmkit.tokenize import tokenize_records
    from prmkit.training.head_init import init_head_from_probe

    tokenizer = load_tokenizer(str(tiny_llama))
    model = load_token_classifier(str(tiny_llama))
    records, _ = load_records(tmp_path / "train.jsonl")
    chains, _ = tokenize_records(tokenizer, records, separator="\n\n", max_length=256)
    return init_head_from_probe(model, chains, tokenizer.pad_token_id, "bce", 256)["weight"]


def test_no_checkpoint_repeats_the_final_model_off_the_save_steps_grid(tiny_llama, tmp_path):
    write_jsonl(generate_records(24, seed=9), tmp_path / "train.jsonl")
    train(load_config(None, [
        f"model.base={tiny_llama}", f"data.train={tmp_path / 'train.jsonl'}", "data.max_length=256",
        f"output_dir={tmp_path}", "run_name=run", "training.max_steps=5", "training.batch_size=4",
        "training.save_steps=2"]))
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert (tmp_path / "run" / "adapter_model.safetensors").is_file()
