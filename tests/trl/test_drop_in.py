"""TRL 1.13's documented PRM example, run with only the import line changed (a tiny local model and in-memory rows
in place of the hub ids), and what it writes: a prmkit run folder every prmkit command reads."""

from __future__ import annotations

import json

import pytest
import torch

from prmkit.model import PRMMetadata


def test_trls_documented_example_runs_with_only_the_import_changed(tiny_qwen2, rows, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # --- TRL's docs/source/prm_trainer.md example; the import is the one changed line ---
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from prmkit.trl import PRMConfig, PRMTrainer

    model = AutoModelForTokenClassification.from_pretrained(str(tiny_qwen2), num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    train_dataset = rows(16)  # load_dataset("trl-lib/math_shepherd", ...)

    training_args = PRMConfig(output_dir="Qwen2-0.5B-Reward-Math-Sheperd")
    trainer = PRMTrainer(model=model, args=training_args, processing_class=tokenizer, train_dataset=train_dataset)
    trainer.train()
    # --- end of the example ---

    run = tmp_path / "Qwen2-0.5B-Reward-Math-Sheperd"
    metadata = PRMMetadata.load(run)
    # TRL's settings, carried over: its separator, max_length, a full fine-tune (no peft_config), 3 epochs of 2 batches
    assert (metadata.separator, metadata.max_length, metadata.finetune, metadata.loss) == ("\n", 1024, "full", "bce")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["optimizer_steps"] == 6 and summary["train_rows"] == 16
    assert trainer.state.global_step == 6 and any("loss" in entry for entry in trainer.state.log_history)

    from prmkit.scoring.scorer import PRMScorer

    row = rows(1, seed=9)[0]
    scores = PRMScorer.from_pretrained(run, device="cpu").score(row["prompt"], row["completions"])
    assert len(scores) == len(row["completions"]) and all(0.0 <= s <= 1.0 for s in scores)
    trainer.save_model()  # TRL scripts call it; the model is already in output_dir

    from prmkit.cli import main
    from prmkit.files import write_jsonl

    write_jsonl(list(rows(6, seed=11)), tmp_path / "held_out.jsonl")
    assert main(["eval", str(run), str(tmp_path / "held_out.jsonl"), "--out", str(tmp_path / "eval"),
                 "--device", "cpu"]) == 0
    assert "held_out" in json.loads((tmp_path / "eval" / "metrics.json").read_text())["splits"]


def test_the_two_label_head_becomes_one_logit_with_the_same_step_scores(tiny_qwen2, rows, tmp_path):
    """P(label 1) of TRL's two-label head = sigmoid of the one logit prmkit starts from, at every token."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from prmkit.trl import PRMConfig, PRMTrainer

    torch.manual_seed(1)
    model = AutoModelForTokenClassification.from_pretrained(str(tiny_qwen2), num_labels=2).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    trainer = PRMTrainer(model=model, args=PRMConfig(output_dir=str(tmp_path / "run")), processing_class=tokenizer,
                         train_dataset=rows(4))
    ids = torch.tensor([tokenizer("Tom has 3 apples.\nThe answer is 42.\n")["input_ids"]])
    with torch.no_grad():
        two = model(input_ids=ids).logits.softmax(-1)[..., 1]
        one = trainer.model.eval()(input_ids=ids).logits[..., 0].sigmoid()
    assert torch.allclose(one, two, atol=1e-6)
    assert trainer.model.config.num_labels == 1 and model.config.num_labels == 2  # the user's object is untouched


def test_adam_on_the_one_logit_at_twice_the_rate_takes_the_two_label_heads_steps():
    """Why the drop-in trains a converted head at 2 x learning_rate: under Adam, TRL's two rows move by lr each in
    opposite directions, so their difference (prmkit's one logit) moves by 2 lr. Same data, same starting head,
    cross-entropy on two rows against BCE on their difference: the logits stay equal step after step."""
    torch.manual_seed(0)
    hidden, labels = torch.randn(24, 8) * 3, (torch.rand(24) < 0.8).long()
    two = torch.nn.Linear(8, 2)
    one = torch.nn.Linear(8, 1)
    with torch.no_grad():
        one.weight.copy_(two.weight[1:] - two.weight[:1])
        one.bias.copy_(two.bias[1:] - two.bias[:1])
    with torch.no_grad():
        start = one(hidden)[:, 0].clone()
    lr = 1e-2
    adam_two, adam_one = torch.optim.Adam(two.parameters(), lr=lr), torch.optim.Adam(one.parameters(), lr=2 * lr)
    for _ in range(20):
        for optimizer, loss in (
                (adam_two, torch.nn.functional.cross_entropy(two(hidden), labels)),
                (adam_one, torch.nn.functional.binary_cross_entropy_with_logits(one(hidden)[:, 0], labels.float()))):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        trl_logit = two(hidden)[:, 1] - two(hidden)[:, 0]
        assert torch.allclose(one(hidden)[:, 0], trl_logit, atol=1e-5)
        assert (trl_logit - start).abs().max() > 0.1  # the heads moved: equal after training, not merely at start


def test_a_converted_head_trains_at_twice_the_learning_rate(tiny_qwen2, rows, tmp_path):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from prmkit.trl import PRMConfig, PRMTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    two_labels = AutoModelForTokenClassification.from_pretrained(str(tiny_qwen2), num_labels=2)
    converted = PRMTrainer(model=two_labels, args=PRMConfig(output_dir=str(tmp_path / "a"), learning_rate=3e-5),
                           processing_class=tokenizer, train_dataset=rows(4))
    assert converted.base.converted and converted.config.training.head_lr == 6e-5
    as_is = PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(output_dir=str(tmp_path / "b"), learning_rate=3e-5),
                       train_dataset=rows(4))
    assert not as_is.base.converted and as_is.config.training.head_lr is None  # a head of prmkit's own: one rate


def test_a_model_folder_given_as_a_string_trains(tiny_qwen2, rows, tmp_path):
    from prmkit.scoring.scorer import PRMScorer
    from prmkit.trl import PRMConfig, PRMTrainer

    args = PRMConfig(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4, max_length=256)
    trainer = PRMTrainer(model=str(tiny_qwen2), args=args, train_dataset=rows(8))
    assert trainer.base.path == str(tiny_qwen2)  # nothing to change: the folder is used where it is
    output = trainer.train()
    assert output.global_step == 2 and output.training_loss is not None
    assert PRMScorer.from_pretrained(tmp_path / "run", device="cpu").score("What is 2 + 2?", ["2 + 2 = 4."])[0] \
        is not None


def test_callbacks_run_beside_prmkits_own(tiny_qwen2, rows, tmp_path):
    from transformers import TrainerCallback

    from prmkit.trl import PRMConfig, PRMTrainer

    class Steps(TrainerCallback):
        seen: list[int] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.seen.append(state.global_step)

    args = PRMConfig(output_dir=str(tmp_path / "run"), max_steps=3, per_device_train_batch_size=4, max_length=256)
    PRMTrainer(model=str(tiny_qwen2), args=args, train_dataset=rows(8), callbacks=[Steps()]).train()
    assert Steps.seen == [1, 2, 3]


def test_lora_through_peft_config_and_evaluate(tiny_qwen2, rows, tmp_path):
    from peft import LoraConfig
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from prmkit.trl import PRMConfig, PRMTrainer

    model = AutoModelForTokenClassification.from_pretrained(str(tiny_qwen2), num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    args = PRMConfig(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4, max_length=256,
                     eval_strategy="steps", eval_steps=1, learning_rate=1e-3)
    trainer = PRMTrainer(model=model, args=args, processing_class=tokenizer,
                         train_dataset=rows(8),
                         eval_dataset=rows(6, seed=5),
                         peft_config=LoraConfig(r=4, lora_alpha=8, task_type="TOKEN_CLS"))
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert {"eval_loss", "eval_accuracy", "eval_auroc"} <= set(after) and before["eval_loss"] != after["eval_loss"]
    metadata = PRMMetadata.load(tmp_path / "run")
    assert metadata.finetune == "lora" and (tmp_path / "run" / "adapter_config.json").is_file()
    adapter = json.loads((tmp_path / "run" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]  # peft's default for qwen2, as TRL would get
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval_metrics"]  # eval_strategy='steps': the run validated on eval_dataset


@pytest.mark.parametrize("resume", [True, "checkpoint"])
def test_resume_from_checkpoint(tiny_qwen2, rows, tmp_path, resume):
    from prmkit.trl import PRMConfig, PRMTrainer

    data = rows(8)
    common = dict(output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, max_length=256, save_steps=1)
    PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(max_steps=2, **common), train_dataset=data).train()
    again = PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(max_steps=3, **common), train_dataset=data)
    with pytest.raises(ValueError, match="resume_from_checkpoint=True"):
        again.train()  # a second run into the same folder is refused, never mixed with the first
    checkpoint = True if resume is True else str(tmp_path / "run" / "checkpoint-2")
    output = again.train(resume_from_checkpoint=checkpoint)
    assert output.global_step == 3
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-2")


def test_resume_with_changed_settings_is_refused_in_trl_terms(tiny_qwen2, rows, tmp_path):
    from prmkit.trl import PRMConfig, PRMTrainer

    data = rows(8)
    common = dict(output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, max_length=256, save_steps=1,
                  max_steps=2)
    PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(**common), train_dataset=data).train()
    changed = PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(learning_rate=3e-4, **common), train_dataset=data)
    with pytest.raises(ValueError, match="training.lr is learning_rate"):
        changed.train(resume_from_checkpoint=True)
