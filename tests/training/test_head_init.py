"""training.head_init=probe: the head starts as a linear probe fitted on the frozen backbone's step features."""

import json

import pytest
import torch

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
