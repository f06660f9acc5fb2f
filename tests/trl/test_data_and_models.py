"""How the drop-in maps TRL's data and model arguments: train_on_last_step_only, max_completion_length, the
starting model written once by content, disable_dropout, the user's tokenizer, and the datasets it reads."""

from __future__ import annotations

import json
from pathlib import Path

from prmkit.data.io import load_records
from prmkit.model import PRMMetadata
from prmkit.tokenize import IGNORE_INDEX, encode, tokenize_records
from prmkit.trl import PRMConfig, PRMTrainer


def small_args(tmp_path, **fields) -> PRMConfig:
    fields = {"max_length": 1024, "per_device_train_batch_size": 4, **fields}
    return PRMConfig(output_dir=str(tmp_path / "run"), **fields)


def test_train_on_last_step_only_labels_the_last_step_alone(tiny_qwen2, rows, tmp_path):
    trainer = PRMTrainer(model=str(tiny_qwen2), args=small_args(tmp_path, train_on_last_step_only=True, max_steps=1),
                         train_dataset=rows(8))
    data = trainer.config.data
    assert data.train_on_last_step_only  # prmkit's own key: the run's metadata records it for the scorer
    records, _ = load_records(data.train)
    chains, _ = tokenize_records(trainer.processing_class, records, separator=data.separator,
                                 max_length=data.max_length, train_on_last_step_only=True)
    for record, chain in zip(records, chains):
        labelled = [i for i, value in enumerate(chain.labels) if value != IGNORE_INDEX]
        assert labelled == [chain.step_positions[-1]]  # TRL: -100 on every step but the last
        assert chain.labels[labelled[0]] == record["labels"][-1]
    trainer.train()
    assert PRMMetadata.load(tmp_path / "run").train_on_last_step_only


def test_max_completion_length_keeps_the_steps_that_fit_whole(tiny_qwen2, rows, tmp_path):
    data = rows(8)
    trainer = PRMTrainer(model=str(tiny_qwen2), args=small_args(tmp_path, max_completion_length=200),
                         train_dataset=data)
    tokenizer, separator = trainer.processing_class, trainer.config.data.separator
    records, _ = load_records(trainer.config.data.train)
    originals = {row["prompt"]: row for row in data}
    assert any(len(r["completions"]) < len(originals[r["prompt"]]["completions"]) for r in records)
    for record in records:
        original = originals[record["prompt"]]
        kept = len(record["completions"])
        assert record["completions"] == original["completions"][:kept]
        assert record["labels"] == original["labels"][:kept]
        used = [len(encode(tokenizer, s)) + len(encode(tokenizer, separator)) for s in original["completions"]]
        assert sum(used[:kept]) <= 200 and (kept == len(used) or sum(used[:kept + 1]) > 200)


def test_max_completion_length_with_last_step_only_drops_chains_whose_last_step_is_cut(tiny_qwen2, rows, tmp_path):
    trainer = PRMTrainer(model=str(tiny_qwen2), args=small_args(tmp_path, max_completion_length=200,
                                                                train_on_last_step_only=True),
                         train_dataset=rows(8))
    records, _ = load_records(trainer.config.data.train)
    originals = {row["prompt"]: row for row in rows(8)}
    assert 0 < len(records) < 8
    assert all(r["completions"] == originals[r["prompt"]]["completions"] for r in records)


def test_the_same_starting_model_is_written_once_and_a_changed_one_again(tiny_qwen2, rows, tmp_path):
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    model = AutoModelForTokenClassification.from_pretrained(str(tiny_qwen2), num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    first = PRMTrainer(model=model, args=small_args(tmp_path), processing_class=tokenizer, train_dataset=rows(4))
    second = PRMTrainer(model=model, args=small_args(tmp_path), processing_class=tokenizer, train_dataset=rows(4))
    assert first.base.path == second.base.path
    assert first.config.data.train == second.config.data.train  # rows by content too: a resume finds its data
    with torch.no_grad():
        model.score.weight.add_(1.0)
    third = PRMTrainer(model=model, args=small_args(tmp_path), processing_class=tokenizer, train_dataset=rows(4))
    assert third.base.path != first.base.path
    source = json.loads((Path(first.base.path) / "prmkit_trl_source.json").read_text())
    assert source["head"].startswith("two-label head")


def test_disable_dropout_zeroes_the_starting_models_dropout(tiny_gpt2, rows, tmp_path):
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(str(tiny_gpt2)).resid_pdrop > 0  # GPT-2's configs come with dropout
    on = PRMTrainer(model=str(tiny_gpt2), args=small_args(tmp_path, max_length=512), train_dataset=rows(4))
    config = AutoConfig.from_pretrained(on.base.path)
    assert (config.resid_pdrop, config.embd_pdrop, config.attn_pdrop) == (0.0, 0.0, 0.0)
    off = PRMTrainer(model=str(tiny_gpt2), args=small_args(tmp_path, disable_dropout=False, max_length=512),
                     train_dataset=rows(4))
    assert off.base.path == str(tiny_gpt2)  # dropout kept: the folder is used where it is


def test_a_processing_class_other_than_the_folders_own_is_the_one_trained_with(tiny_qwen2, rows, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<step>"]})
    trainer = PRMTrainer(model=str(tiny_qwen2), args=small_args(tmp_path), processing_class=tokenizer,
                         train_dataset=rows(4))
    assert trainer.base.path != str(tiny_qwen2)
    assert "<step>" in AutoTokenizer.from_pretrained(trainer.base.path).get_vocab()


def test_soft_and_rated_labels_streamed_rows_and_eval_strategy_no(tiny_qwen2, rows, tmp_path):
    from datasets import Dataset

    soft = Dataset.from_list([{"prompt": "What is 3 + 12?", "completions": ["3 + 12 = 15.", "The answer is 15."],
                               "labels": [0.9, 0.25]}])
    rated = Dataset.from_list([{"prompt": "What is 3 + 12?", "completions": ["3 + 12 = 15.", "The answer is 16."],
                                "labels": [1, -1]}])
    for data in (soft, rated, rows(4).to_iterable_dataset()):
        trainer = PRMTrainer(model=str(tiny_qwen2), args=small_args(tmp_path), train_dataset=data,
                             eval_dataset=rows(2, seed=4))
        assert trainer.config.data.val is None  # eval_strategy='no' (TRL's default): evaluate() only when asked


def test_save_model_elsewhere_writes_a_folder_that_scores_on_its_own(tiny_qwen2, rows, tmp_path):
    from prmkit.scoring.scorer import PRMScorer

    trainer = PRMTrainer(model=str(tiny_qwen2), args=small_args(tmp_path, max_steps=1), train_dataset=rows(4))
    trainer.train()
    trainer.save_model(str(tmp_path / "copy"))
    scorer = PRMScorer.from_pretrained(tmp_path / "copy", device="cpu")
    assert scorer.score("What is 2 + 2?", ["2 + 2 = 4."]) == \
        PRMScorer.from_pretrained(tmp_path / "run", device="cpu").score("What is 2 + 2?", ["2 + 2 = 4."])
