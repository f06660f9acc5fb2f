"""The ranking term in real training runs: it is logged, every batch holds pairs, gradient accumulation does not
change it, validation reports the within-problem AUROC, the best checkpoint by it becomes the final model, a
run resumes, and data without pairs is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prmkit.config import load_config
from prmkit.errors import PRMError
from prmkit.files import write_jsonl
from prmkit.training.trainer import train


def sibling_records(prompts: int, right: int, wrong: int, first: int = 3) -> list[dict]:
    """`prompts` problems, each with `right` right and `wrong` wrong two-step samples."""
    rows = []
    for p in range(first, first + prompts):
        for k in range(right + wrong):
            is_right = k < right
            total = p + 12 if is_right else p + 13 + k
            rows.append({"prompt": f"Tom has {p} apples and buys 12 more. How many?",
                         "completions": [f"{p} + 12 = {total}.", f"The answer is {total}."],
                         "labels": [int(is_right), int(is_right)]})
    return rows


def run(tiny_llama, root, *extra) -> dict:
    summary = train(load_config(None, [
        f"model.base={tiny_llama}", f"data.train={root / 'train.jsonl'}", "data.max_length=64",
        f"output_dir={root}", "run_name=run", "training.logging_steps=1", "training.lr=5e-3", "lora.r=4",
        "training.save_steps=1", *extra]))
    return {"summary": summary, "log": json.loads((root / "run" / "trainer_state.json").read_text())["log_history"]}


def train_logs(log: list[dict]) -> list[dict]:
    return [entry for entry in log if "loss" in entry]


def test_every_batch_holds_a_pair_and_the_term_is_in_the_loss(tiny_llama, tmp_path):
    # 8 prompts x (1 right, 1 wrong), batches of 2: a random batch would hold a pair 1 time in 15
    write_jsonl(sibling_records(8, 1, 1), tmp_path / "train.jsonl")
    logs = train_logs(run(tiny_llama, tmp_path, "training.batch_size=2", "training.max_steps=4",
                          "loss.ranking_weight=1.0")["log"])
    assert [entry["step"] for entry in logs] == [1, 2, 3, 4]
    # one pair per batch: the term is -log sigmoid(s_r - s_w) > 0, never the 0 of a batch without a pair
    assert all(entry["ranking_loss"] > 0.05 for entry in logs)


def test_weight_zero_is_the_plain_step_loss_and_the_term_adds_weight_times_ranking(tiny_llama, tmp_path):
    write_jsonl(sibling_records(2, 1, 1), tmp_path / "train.jsonl")
    first = {}
    for weight in (0.0, 2.0):
        root = tmp_path / str(weight)
        root.mkdir()
        (root / "train.jsonl").write_text((tmp_path / "train.jsonl").read_text())
        extra = [f"loss.ranking_weight={weight}"] if weight else []
        first[weight] = train_logs(run(tiny_llama, root, "training.batch_size=4", "training.max_steps=1",
                                       *extra)["log"])[0]
    assert "ranking_loss" not in first[0.0]
    # one batch of all four rows, the same weights at step 1: only the ranking term differs
    assert first[2.0]["loss"] == pytest.approx(first[0.0]["loss"] + 2.0 * first[2.0]["ranking_loss"], rel=1e-5)


def test_gradient_accumulation_neither_multiplies_nor_averages_the_term(tiny_llama, tmp_path):
    # 2 prompts x (1 right, 2 wrong): one batch of 6, or two batches of 3 (one prompt each) accumulated
    write_jsonl(sibling_records(2, 1, 2), tmp_path / "train.jsonl")
    first = {}
    for batch, accumulation in ((6, 1), (3, 2)):
        root = tmp_path / f"{batch}x{accumulation}"
        root.mkdir()
        (root / "train.jsonl").write_text((tmp_path / "train.jsonl").read_text())
        first[batch] = train_logs(run(tiny_llama, root, f"training.batch_size={batch}", "training.max_steps=1",
                                      f"training.gradient_accumulation_steps={accumulation}",
                                      "loss.ranking_weight=0.5")["log"])[0]
    for key in ("loss", "ranking_loss", "grad_norm"):
        assert first[3][key] == pytest.approx(first[6][key], rel=1e-4), key


def test_validation_reports_within_problem_auroc_keeps_the_best_checkpoint_and_resumes(tiny_llama, tmp_path):
    write_jsonl(sibling_records(4, 2, 2), tmp_path / "train.jsonl")
    write_jsonl(sibling_records(3, 1, 2, first=40), tmp_path / "val.jsonl")
    settings = ["training.batch_size=4", "loss.ranking_weight=0.5", f"data.val={tmp_path / 'val.jsonl'}",
                "training.eval_steps=1", "training.best_metric=within_problem_auroc"]
    result = run(tiny_llama, tmp_path, "training.max_steps=2", *settings)
    evals = [entry for entry in result["log"] if "eval_within_problem_auroc" in entry]
    assert [entry["step"] for entry in evals] == [1, 2, 2]  # each step, then the final model once
    assert all(0.0 <= e["eval_within_problem_auroc"] <= 1.0 and e["eval_within_problem_problems"] == 3 for e in evals)
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    best = max(evals[:2], key=lambda e: e["eval_within_problem_auroc"])  # ties keep the first, as transformers does
    assert state["best_model_checkpoint"].endswith(f"checkpoint-{best['step']}")
    summary = result["summary"]
    assert summary.best_checkpoint == state["best_model_checkpoint"]
    # the final model is the best checkpoint's: its evaluation repeats that checkpoint's
    assert summary.eval_metrics["within_problem_auroc"] == pytest.approx(best["eval_within_problem_auroc"])
    assert summary.eval_metrics["loss"] == pytest.approx(best["eval_loss"], rel=1e-5)

    resumed = run(tiny_llama, tmp_path, "training.max_steps=3", "training.resume=latest", *settings)
    assert resumed["summary"].optimizer_steps == 3 and resumed["summary"].resumed_from.endswith("checkpoint-2")
    step3 = [entry for entry in train_logs(resumed["log"]) if entry["step"] == 3]
    assert len(step3) == 1 and step3[0]["ranking_loss"] > 0
    # the ranking settings change what a run learns: a resume keeps them
    changed = [*settings[:1], "loss.ranking_weight=1.0", *settings[2:]]
    with pytest.raises(PRMError, match="loss.ranking_weight is 1.0, the run started with 0.5"):
        run(tiny_llama, tmp_path, "training.max_steps=4", "training.resume=latest", *changed)


def test_training_data_without_a_right_and_a_wrong_sample_of_one_prompt_is_refused(tiny_llama, tmp_path):
    write_jsonl(sibling_records(4, 1, 0) + sibling_records(4, 0, 1, first=20), tmp_path / "train.jsonl")
    with pytest.raises(PRMError) as err:
        run(tiny_llama, tmp_path, "training.max_steps=1", "loss.ranking_weight=0.5")
    message = str(err.value)
    assert f"{tmp_path / 'train.jsonl'}: loss.ranking_weight=0.5" in message
    assert "none of its 8 prompts has both a right and a wrong sample" in message
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


def test_pairs_that_max_length_cuts_do_not_count(tiny_llama, tmp_path):
    rows = sibling_records(2, 1, 1)
    for row in rows[1::2]:  # every wrong sample gets a long step after its first
        row["completions"].insert(1, " ".join(["Step 1: 7 - 2 = 5."] * 20))
        row["labels"].insert(1, 0)
    write_jsonl(rows, tmp_path / "train.jsonl")
    with pytest.raises(PRMError, match="none of its 2 prompts has both a right and a wrong sample that fits"):
        run(tiny_llama, tmp_path, "training.max_steps=1", "loss.ranking_weight=0.5")


def test_a_within_problem_best_metric_needs_validation_prompts_with_both_outcomes(tiny_llama, tmp_path):
    write_jsonl(sibling_records(2, 1, 1), tmp_path / "train.jsonl")
    write_jsonl(sibling_records(3, 1, 0, first=40), tmp_path / "val.jsonl")
    with pytest.raises(PRMError, match="training.best_metric=within_problem_auroc, but no prompt of the validation"):
        run(tiny_llama, tmp_path, "training.max_steps=1", f"data.val={tmp_path / 'val.jsonl'}",
            "training.eval_steps=1", "training.best_metric=within_problem_auroc")
    # a validation fraction too small to hold out a single problem leaves nothing to pick by
    with pytest.raises(PRMError, match=r"training.best_metric=loss, but there are no validation rows .*val_fraction"):
        run(tiny_llama, tmp_path, "training.max_steps=1", "data.val_fraction=0.01", "training.eval_steps=1",
            "training.best_metric=loss")


def test_two_processes_train_like_one_process_accumulating_the_same_batches(tiny_llama, tmp_path):
    """Under DDP each process ranks the pairs of its own batches; pairs are counted over all processes and the term
    scaled as the engine scales the step loss, so two processes with batches of 4 train exactly as one process
    accumulating the same two batches."""
    write_jsonl(sibling_records(4, 1, 3), tmp_path / "train.jsonl")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'runs'}\nmodel: {{base: {tiny_llama}}}\n"
                   f"data: {{train: {tmp_path / 'train.jsonl'}, max_length: 64}}\nlora: {{r: 4, dropout: 0.0}}\n"
                   "loss: {ranking_weight: 0.5}\n"
                   "training: {max_steps: 2, batch_size: 4, save_steps: 100, logging_steps: 1, lr: 0.005}\n")
    launches = {"ddp": ["-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "prmkit", "train", str(cfg),
                        "run_name=ddp"],
                "single": ["-m", "prmkit", "train", str(cfg), "run_name=single",
                           "training.gradient_accumulation_steps=2"]}
    logs = {}
    for name, command in launches.items():
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        state = json.loads((tmp_path / "runs" / name / "trainer_state.json").read_text())
        logs[name] = train_logs(state["log_history"])
    for key in ("loss", "ranking_loss", "grad_norm"):
        assert [e[key] for e in logs["ddp"]] == pytest.approx([e[key] for e in logs["single"]], rel=1e-4), key
