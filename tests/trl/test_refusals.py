"""Every argument the drop-in cannot honour is refused by name, with what to use instead, before anything is
trained or written; all of a trainer's refusals come in one error."""

from __future__ import annotations

import pytest
import torch

from prmkit.errors import PRMError
from prmkit.trl import PRMConfig, PRMTrainer
from prmkit.trl.arguments import INSTEAD, MAPPED


def refused(tiny_qwen2, rows, tmp_path, *, args: dict | None = None, **kwargs) -> str:
    kwargs.setdefault("model", str(tiny_qwen2))
    kwargs.setdefault("train_dataset", rows(4))
    with pytest.raises(PRMError) as caught:
        PRMTrainer(args=PRMConfig(output_dir=str(tmp_path / "run"), **(args or {})), **kwargs)
    return str(caught.value)


class NotACollator:
    def __call__(self, features):
        return features


@pytest.mark.parametrize("argument, value", [
    ("data_collator", NotACollator()), ("model_init", lambda: None), ("compute_metrics", lambda p: {}),
    ("optimizers", (object(), None)), ("preprocess_logits_for_metrics", lambda logits, labels: logits),
])
def test_each_trainer_argument_prmkit_cannot_honour_is_refused_by_name(tiny_qwen2, rows, tmp_path, argument, value):
    assert argument in refused(tiny_qwen2, rows, tmp_path, **{argument: value})


def test_trls_own_default_collator_and_empty_callbacks_are_accepted(tiny_qwen2, rows, tmp_path):
    from transformers import AutoTokenizer, DataCollatorForTokenClassification

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(output_dir=str(tmp_path / "run")), train_dataset=rows(4),
               data_collator=DataCollatorForTokenClassification(tokenizer), callbacks=[], processing_class=tokenizer)


# A value other than the default for each field whose refusal says what to use instead.
FIELD_VALUES = {
    "push_to_hub": True, "label_smoothing_factor": 0.1, "disable_tqdm": True, "use_liger_kernel": True,
    "torch_compile_backend": "eager", "torch_compile_mode": "max-autotune", "eval_on_start": True,
    "auto_find_batch_size": True, "remove_unused_columns": False, "label_names": ["labels"],
    "length_column_name": "n", "lr_scheduler_kwargs": {"num_cycles": 2}, "include_for_metrics": ["inputs"],
    "batch_eval_metrics": True, "bf16_full_eval": True, "max_prompt_length": 512, "fp16_full_eval": True,
    "run_name": "my-wandb-run",
}


@pytest.mark.parametrize("field", sorted(INSTEAD))
def test_each_training_argument_without_a_prmkit_equivalent_is_refused_by_name(tiny_qwen2, rows, tmp_path, field):
    # transformers itself refuses bf16 on a CPU unless use_cpu (which prmkit accepts where there is no GPU)
    cpu = {"use_cpu": True} if field == "bf16_full_eval" and not torch.cuda.is_available() else {}
    message = refused(tiny_qwen2, rows, tmp_path, args={field: FIELD_VALUES[field], **cpu})
    assert f"{field}=" in message and INSTEAD[field] in message


@pytest.mark.parametrize("args, named", [
    ({"adam_beta2": 0.95}, "adam_beta2=0.95: prmkit's training has no such setting"),
    ({"neftune_noise_alpha": 5.0}, "neftune_noise_alpha=5.0"),
    ({"max_completion_length": 0}, "max_completion_length=0"),
    ({"logging_strategy": "epoch"}, "logging_strategy='epoch'"),
    ({"logging_steps": 0.1}, "logging_steps=0.1"),
    ({"save_strategy": "epoch"}, "save_strategy='epoch'"),
    ({"save_steps": 0.5}, "save_steps=0.5"),
    ({"data_seed": 7}, "data_seed=7"),
    ({"gradient_checkpointing_kwargs": {"use_reentrant": True}}, "gradient_checkpointing_kwargs="),
    ({"lr_scheduler_type": "warmup_stable_decay"}, "lr_scheduler_type='warmup_stable_decay'"),
    ({"optim": "adamw_torch_4bit"}, "optim='adamw_torch_4bit'"),
    ({"train_sampling_strategy": "sequential"}, "train_sampling_strategy='sequential'"),
    ({"eval_strategy": "steps", "eval_steps": 5}, "eval_strategy='steps' needs an eval_dataset"),
    ({"max_length": 4096}, "max_length=4096 but the model reads at most 2048 tokens"),
])
def test_training_arguments_prmkit_cannot_honour_are_refused_by_name(tiny_qwen2, rows, tmp_path, args, named):
    assert named in refused(tiny_qwen2, rows, tmp_path, args=args)


@pytest.mark.parametrize("args, named", [
    ({"metric_for_best_model": "accuracy"}, "metric_for_best_model='accuracy'"),
    ({"metric_for_best_model": "eval_loss", "greater_is_better": True}, "greater_is_better=True"),
    ({"eval_delay": 2}, "eval_delay=2"),
])
def test_best_model_settings_prmkit_cannot_honour_are_refused(tiny_qwen2, rows, tmp_path, args, named):
    args = {"eval_strategy": "steps", "eval_steps": 2, "save_steps": 2, "load_best_model_at_end": True, **args}
    assert named in refused(tiny_qwen2, rows, tmp_path, args=args, eval_dataset=rows(2, seed=4))


def test_all_refusals_of_one_trainer_come_together(tiny_qwen2, rows, tmp_path):
    message = refused(tiny_qwen2, rows, tmp_path, args={"push_to_hub": True, "adam_beta1": 0.8},
                      compute_metrics=lambda p: {})
    assert "3 argument(s)" in message
    assert all(name in message for name in ("push_to_hub", "adam_beta1", "compute_metrics"))


@pytest.mark.parametrize("peft_settings, named", [
    ({"use_dora": True}, "peft_config.use_dora=True"),
    ({"bias": "all"}, "peft_config.bias='all'"),
    ({"use_rslora": True}, "peft_config.use_rslora=True"),
    ({"task_type": "CAUSAL_LM"}, "peft_config.task_type='CAUSAL_LM'"),
    ({"modules_to_save": ["embed_tokens"]}, "peft_config.modules_to_save"),
    ({"target_modules": ".*proj"}, "peft_config.target_modules='.*proj'"),
    ({"layers_to_transform": [0]}, "peft_config.layers_to_transform=[0]"),
])
def test_lora_settings_prmkit_cannot_honour_are_refused_by_name(tiny_qwen2, rows, tmp_path, peft_settings, named):
    from peft import LoraConfig

    assert named in refused(tiny_qwen2, rows, tmp_path, peft_config=LoraConfig(**peft_settings))


def test_a_peft_method_other_than_lora_is_refused(tiny_qwen2, rows, tmp_path):
    from peft import IA3Config

    assert "peft_config=IA3Config" in refused(tiny_qwen2, rows, tmp_path, peft_config=IA3Config())


def test_lora_settings_prmkit_carries_over_are_accepted(tiny_qwen2, rows, tmp_path):
    from peft import LoraConfig

    trainer = PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(output_dir=str(tmp_path / "run")),
                         train_dataset=rows(4),
                         peft_config=LoraConfig(r=4, lora_alpha=16, lora_dropout=0.1,
                                                target_modules=["v_proj", "q_proj"], layers_to_transform=[1],
                                                modules_to_save=["score"]))
    lora = trainer.config.lora
    assert (lora.r, lora.alpha, lora.dropout, lora.top_layers) == (4, 16, 0.1, 1)
    assert lora.target_modules == ["q_proj", "v_proj"]


@pytest.mark.parametrize("dataset_kind, named", [
    ("dict", "train_dataset is a dict"), ("tokenized", "already tokenized"), ("bad_label", "labels[1]"),
])
def test_datasets_prmkit_cannot_read_are_refused_with_the_row(tiny_qwen2, rows, tmp_path, dataset_kind, named):
    from datasets import Dataset, DatasetDict

    data = {"dict": lambda: DatasetDict(train=rows(2)),
            "tokenized": lambda: Dataset.from_list([{"input_ids": [1, 2], "labels": [-100, 1]}]),
            "bad_label": lambda: Dataset.from_list([{"prompt": "p", "completions": ["a", "b"], "labels": [1, 2]}]),
            }[dataset_kind]()
    message = refused(tiny_qwen2, rows, tmp_path, train_dataset=data)
    assert named in message and (dataset_kind != "bad_label" or "train_dataset" in message)


def test_models_prmkit_cannot_train_are_refused(tiny_qwen2, rows, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    three = AutoModelForTokenClassification.from_pretrained(str(tiny_qwen2), num_labels=3)
    assert "3-label head" in refused(tiny_qwen2, rows, tmp_path, model=three, processing_class=tokenizer)
    wrapped = get_peft_model(AutoModelForTokenClassification.from_pretrained(str(tiny_qwen2), num_labels=2),
                             LoraConfig(r=2, task_type="TOKEN_CLS"))
    assert "peft_config" in refused(tiny_qwen2, rows, tmp_path, model=wrapped, processing_class=tokenizer)


def test_train_refuses_a_hyperparameter_search(tiny_qwen2, rows, tmp_path):
    trainer = PRMTrainer(model=str(tiny_qwen2), args=PRMConfig(output_dir=str(tmp_path / "run")),
                         train_dataset=rows(4))
    with pytest.raises(PRMError, match="trial"):
        trainer.train(trial={"learning_rate": 1e-4})


def test_args_of_another_class_are_refused(tiny_qwen2, rows, tmp_path):
    from transformers import TrainingArguments

    with pytest.raises(PRMError, match="prmkit.trl.PRMConfig"):
        PRMTrainer(model=str(tiny_qwen2), args=TrainingArguments(output_dir=str(tmp_path)), train_dataset=rows(4))


def test_every_mapped_field_is_a_field_of_prmconfig():
    import dataclasses

    names = {f.name for f in dataclasses.fields(PRMConfig)}
    assert set(MAPPED) <= names, set(MAPPED) - names


def test_a_config_parsed_from_the_command_line_counts_only_what_was_given(tiny_qwen2, rows, tmp_path):
    """TRL's scripts parse PRMConfig with HfArgumentParser, which passes some defaults in another spelling (False
    for 'no', '' for []): those are not settings of the user's, and nothing is refused for them."""
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(PRMConfig).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path / "run"), "--learning_rate", "3e-5", "--adam_beta1", "0.8"])
    assert args.fields_set() == {"output_dir", "learning_rate", "adam_beta1"}
    with pytest.raises(PRMError, match="1 argument") as caught:
        PRMTrainer(model=str(tiny_qwen2), args=args, train_dataset=rows(4))
    assert "adam_beta1=0.8" in str(caught.value)


def test_a_field_transformers_fills_from_the_environment_is_refused_whatever_the_logging_level(monkeypatch):
    """disable_tqdm's default comes from the logging level when a config is built; a quiet level must not make a
    user's disable_tqdm=True look like the default."""
    from transformers.utils import logging

    from prmkit.trl import config as trl_config
    from prmkit.trl.arguments import refused_fields

    monkeypatch.setattr(trl_config, "_REFERENCES", {})
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        assert any(p.startswith("disable_tqdm=True") for p in refused_fields(PRMConfig(output_dir="x",
                                                                                       disable_tqdm=True)))
        assert refused_fields(PRMConfig(output_dir="y")) == []
    finally:
        logging.set_verbosity(level)
