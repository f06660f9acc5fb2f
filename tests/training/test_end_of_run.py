"""The end of a run: the final model is written before the last evaluation, and the final weights are evaluated
once. A run that dies during that evaluation has lost no training."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from prmkit.config import load_config
from prmkit.data.synthetic import generate_records
from prmkit.files import write_jsonl
from prmkit.model import METADATA_FILE
from prmkit.training.trainer import PRMTrainer, train

WEIGHTS = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    write_jsonl(generate_records(16, seed=1), folder / "train.jsonl")
    write_jsonl(generate_records(4, seed=2), folder / "val.jsonl")
    return folder


def tiny_config(model_dir, data, out, *overrides):
    return load_config(None, [
        f"model.base={model_dir}", f"data.train={data / 'train.jsonl'}", f"data.val={data / 'val.jsonl'}",
        "data.max_length=160", f"output_dir={out}", "run_name=run", "training.max_steps=3", "training.batch_size=4",
        "training.save_steps=2", "training.logging_steps=1", "training.lr=5e-3", "lora.r=4", *overrides])


def test_a_run_preempted_in_its_last_evaluation_keeps_its_final_weights(tiny_llama, data, tmp_path, monkeypatch):
    """Step 3 is off the save_steps=2 grid: the only copy of its weights is the final model, so it must be on disk
    before anything evaluates them."""
    evaluate = PRMTrainer.evaluate

    def preempted_at_the_end(self, *args, **kwargs):
        if self.state.global_step >= self.state.max_steps:
            raise RuntimeError("preempted")
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(PRMTrainer, "evaluate", preempted_at_the_end)
    with pytest.raises(RuntimeError, match="preempted"):
        train(tiny_config(tiny_llama, data, tmp_path))
    run = tmp_path / "run"
    assert (run / METADATA_FILE).is_file() and (run / WEIGHTS).is_file()
    final, checkpoint = load_file(run / WEIGHTS), load_file(run / "checkpoint-2" / WEIGHTS)
    assert any(not final[key].equal(checkpoint[key]) for key in final)  # step 3's weights, not step 2's
    assert not (run / "checkpoint-3").exists()  # the final model is not written twice


def test_the_final_weights_are_evaluated_once(tiny_llama, data, tmp_path):
    summary = train(tiny_config(tiny_llama, data, tmp_path, "training.eval_steps=2"))
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    evaluations = [entry for entry in history if "eval_loss" in entry]
    assert [entry["step"] for entry in evaluations] == [2, 3]
    assert summary.eval_metrics["loss"] == evaluations[-1]["eval_loss"]
