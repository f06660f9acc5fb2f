"""TRL's PRMConfig (+ peft_config) -> prmkit's typed config: every field either maps onto a prmkit key, is one the
Trainer never reads, or is refused by name with what to use instead when it was set. All refusals of a trainer are
reported together, in TRL's spelling.

docs/trl.md is the table in prose; a field added here belongs there too.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from prmkit.config import DataConfig, TrainingConfig
from prmkit.device import available_device
from prmkit.errors import PRMError
from prmkit.trl.config import PRMConfig

# A save_steps no run reaches: save_strategy="no" keeps no checkpoint, only the final model.
NEVER = 2**31 - 1

# TrainingArguments fields that prmkit's config carries (read in `training_config`), with the prmkit key each sets.
MAPPED = {
    "output_dir": "output_dir, run_name", "num_train_epochs": "training.epochs", "max_steps": "training.max_steps",
    "per_device_train_batch_size": "training.batch_size", "per_device_eval_batch_size": "training.eval_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps", "learning_rate": "training.lr",
    "lr_scheduler_type": "training.scheduler", "warmup_steps": "training.warmup_steps / training.warmup_ratio",
    "weight_decay": "training.weight_decay", "max_grad_norm": "training.max_grad_norm",
    "optim": "training.optimizer", "activation_checkpointing": "training.gradient_checkpointing",
    "gradient_checkpointing": "training.gradient_checkpointing",
    "activation_checkpointing_kwargs": "(non-reentrant checkpointing)",
    "gradient_checkpointing_kwargs": "(non-reentrant checkpointing)",
    "torch_compile": "training.torch_compile", "seed": "training.seed", "data_seed": "training.seed",
    "logging_steps": "training.logging_steps", "logging_strategy": "(steps)", "logging_first_step": "(always on)",
    "eval_strategy": "training.eval_steps", "eval_steps": "training.eval_steps", "save_strategy": "training.save_steps",
    "save_steps": "training.save_steps", "save_total_limit": "training.save_total_limit",
    "load_best_model_at_end": "training.best_metric", "metric_for_best_model": "training.best_metric",
    "greater_is_better": "training.best_metric", "report_to": "training.report_to",
    "dataloader_num_workers": "training.dataloader_num_workers", "train_sampling_strategy": "training.group_by_length",
    "bf16": "precision", "fp16": "precision", "use_cpu": "precision", "fsdp": "distributed.fsdp",
    "fsdp_config": "distributed.fsdp_config", "deepspeed": "distributed.deepspeed",
    "ddp_find_unused_parameters": "distributed.ddp_find_unused_parameters",
    # TRL's PRM fields
    "max_length": "data.max_length", "max_completion_length": "(whole steps cut from each chain's end)",
    "step_separator": "data.separator", "train_on_last_step_only": "data.train_on_last_step_only",
    "disable_dropout": "(dropout set to 0 in the starting model's config)",
    "dataset_num_proc": "(none: prmkit tokenizes in the training process)",
}
# Fields of a launch script that transformers' Trainer never reads itself (a script passes resume_from_checkpoint to
# trainer.train; the launcher sets local_rank), and the hub settings, which act only with push_to_hub (refused).
NOT_READ = {"do_train", "do_eval", "do_predict", "resume_from_checkpoint", "local_rank", "hub_token",
            "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision"}
# What to use instead, for the refused fields a TRL user is likely to set; the others get the generic advice.
INSTEAD = {
    "push_to_hub": "export the run with `prmkit export OUTPUT_DIR --merge OUT --hub-id OWNER/NAME`, which writes a "
                   "model card and prints the `hf upload` command",
    "label_smoothing_factor": "give soft labels instead: prmkit trains on a float label in [0, 1] per step",
    "disable_tqdm": "prmkit shows its own progress (a bar on a terminal, a line per logging step in a log)",
    "use_liger_kernel": "prmkit's model has no LM head, so Liger's fused LM-head losses have nothing to fuse",
    "torch_compile_backend": "torch_compile=True compiles with inductor, by regions, with dynamic shapes",
    "torch_compile_mode": "torch_compile=True compiles with inductor, by regions, with dynamic shapes",
    "eval_on_start": "call trainer.evaluate() before trainer.train()",
    "auto_find_batch_size": "set per_device_train_batch_size",
    "remove_unused_columns": "prmkit keeps the prompt, completions and labels columns and drops the others itself",
    "label_names": "prmkit reads the labels column",
    "length_column_name": "train_sampling_strategy='group_by_length' groups by the tokenized length itself",
    "lr_scheduler_kwargs": "choose a lr_scheduler_type that needs no arguments",
    "include_for_metrics": "prmkit's evaluation reports its own metrics (loss, accuracy, auroc, ...)",
    "batch_eval_metrics": "prmkit's evaluation reports its own metrics (loss, accuracy, auroc, ...)",
    "bf16_full_eval": "evaluation runs under the training precision (bf16=True)",
    "fp16_full_eval": "evaluation runs under the training precision (fp16=True)",
    "run_name": "prmkit names the run after the last folder of output_dir",
    "max_prompt_length": "TRL 1.13 has no such field (older TRL releases cut the prompt to it); prmkit keeps the "
                         "whole prompt and cuts its start only as far as the first step needs to fit max_length",
}
GENERIC_INSTEAD = "prmkit's training has no such setting; remove it (docs/trl.md lists what is supported)"

# prmkit config keys -> the PRMConfig (or PRMTrainer) names they come from, to translate prmkit's own errors.
KEY_SOURCES = {
    "data.max_length": "max_length", "data.separator": "step_separator", "data.train": "train_dataset",
    "data.val": "eval_dataset", "data.train_on_last_step_only": "train_on_last_step_only",
    "training.lr": "learning_rate", "training.epochs": "num_train_epochs", "training.max_steps": "max_steps",
    "training.batch_size": "per_device_train_batch_size", "training.eval_batch_size": "per_device_eval_batch_size",
    "training.gradient_accumulation_steps": "gradient_accumulation_steps", "training.scheduler": "lr_scheduler_type",
    "training.warmup_steps": "warmup_steps", "training.warmup_ratio": "warmup_steps",
    "training.weight_decay": "weight_decay", "training.max_grad_norm": "max_grad_norm",
    "training.optimizer": "optim", "training.gradient_checkpointing": "gradient_checkpointing",
    "training.torch_compile": "torch_compile", "training.seed": "seed", "training.logging_steps": "logging_steps",
    "training.eval_steps": "eval_steps", "training.save_steps": "save_steps",
    "training.save_total_limit": "save_total_limit", "training.best_metric": "metric_for_best_model",
    "training.report_to": "report_to", "training.resume": "trainer.train(resume_from_checkpoint=...)",
    "model.base": "model", "lora.r": "peft_config.r", "lora.alpha": "peft_config.lora_alpha",
    "lora.dropout": "peft_config.lora_dropout", "lora.target_modules": "peft_config.target_modules",
    "lora.top_layers": "peft_config.layers_to_transform", "distributed.fsdp": "fsdp",
    "distributed.fsdp_config": "fsdp_config", "distributed.deepspeed": "deepspeed", "precision": "bf16/fp16",
}


def in_trl_terms(err: PRMError) -> PRMError:
    """The same error, with the PRMConfig name of every prmkit key it mentions (prmkit's checks speak prmkit)."""
    message = str(err)
    found = [key for key in KEY_SOURCES if re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", message)]
    if not found:
        return err
    names = ", ".join(f"{key} is {KEY_SOURCES[key]}" for key in found)
    return PRMError(f"{message}\n(prmkit's names, as PRMTrainer maps them: {names})")


def refused_fields(args: PRMConfig) -> list[str]:
    """Set TrainingArguments fields that prmkit cannot honour, each with what to use instead."""
    return [f"{name}={getattr(args, name)!r}: {INSTEAD.get(name, GENERIC_INSTEAD)}"
            for name in sorted(args.fields_set()) if name not in MAPPED and name not in NOT_READ]


def training_config(args: PRMConfig, *, has_eval: bool) -> tuple[dict, list[str]]:
    """The prmkit config sections that PRMConfig's TrainingArguments fields set (output_dir, run_name, precision,
    training, distributed), and the problems: values prmkit has no equivalent of."""
    problems: list[str] = []
    set_fields = args.fields_set()
    output = Path(args.output_dir).expanduser().resolve()
    tree: dict = {"output_dir": str(output.parent), "run_name": output.name, "precision": _precision(args, problems)}
    t: dict = {"lr": args.learning_rate, "batch_size": args.per_device_train_batch_size,
               "eval_batch_size": args.per_device_eval_batch_size,
               "gradient_accumulation_steps": args.gradient_accumulation_steps, "weight_decay": args.weight_decay,
               "max_grad_norm": args.max_grad_norm, "seed": args.seed, "save_total_limit": args.save_total_limit,
               "dataloader_num_workers": args.dataloader_num_workers, "torch_compile": args.torch_compile,
               "gradient_checkpointing": bool(args.activation_checkpointing), "report_to": _report_to(args)}
    if args.max_steps > 0:
        t["max_steps"] = args.max_steps  # transformers: max_steps overrides num_train_epochs
    else:
        t["epochs"] = args.num_train_epochs
    t["scheduler"] = _choice("lr_scheduler_type", args.lr_scheduler_type, "scheduler", problems)
    t["optimizer"] = _choice("optim", args.optim, "optimizer", problems)
    if 0 < args.warmup_steps < 1:
        t["warmup_ratio"] = args.warmup_steps  # transformers reads a warmup_steps below 1 as a ratio of the run
    else:
        t["warmup_steps"] = int(args.warmup_steps)
    t["logging_steps"] = _step_count("logging_steps", args.logging_steps, problems)
    if _value(args.logging_strategy) != "steps":
        problems.append(f"logging_strategy={_value(args.logging_strategy)!r}: prmkit logs by steps; use "
                        "logging_strategy='steps' with logging_steps=N")
    kwargs = args.activation_checkpointing_kwargs
    if kwargs not in (None, {}, {"use_reentrant": False}):
        problems.append(f"gradient_checkpointing_kwargs={kwargs!r}: prmkit checkpoints non-reentrantly "
                        "({'use_reentrant': False}); remove it")
    if args.data_seed is not None and args.data_seed != args.seed:
        problems.append(f"data_seed={args.data_seed}: prmkit shuffles the data with the run's seed; set seed instead")
    t.update(_evaluation(args, has_eval, problems))
    t.update(_saving(args, problems))
    t["best_metric"] = _best_metric(args, has_eval, problems)
    sampling = args.train_sampling_strategy
    if sampling not in ("random", "group_by_length"):
        problems.append(f"train_sampling_strategy={sampling!r}: prmkit batches at random or grouped by length; use "
                        "'random' or 'group_by_length'")
    t["group_by_length"] = sampling == "group_by_length"
    tree["training"] = t
    distributed = {}
    if "fsdp" in set_fields and args.fsdp:
        distributed["fsdp"] = " ".join(_value(o) for o in args.fsdp) if isinstance(args.fsdp, list) else args.fsdp
    if "fsdp_config" in set_fields and args.fsdp_config:
        distributed["fsdp_config"] = dict(args.fsdp_config)
    if args.deepspeed:
        distributed["deepspeed"] = args.deepspeed
    if args.ddp_find_unused_parameters is not None:
        distributed["ddp_find_unused_parameters"] = args.ddp_find_unused_parameters
    tree["distributed"] = distributed
    return tree, problems


def data_config(args: PRMConfig, *, context_length: int | None) -> tuple[dict, list[str]]:
    """The data section from TRL's PRM fields (the files are added by the trainer)."""
    problems = []
    max_length = args.max_length
    if max_length is None:  # TRL: no truncation; prmkit needs a bound, and the backbone's context is the real one
        if context_length is None:
            problems.append("max_length=None: the backbone's config does not say how many tokens it reads; set "
                            "max_length to a number of tokens")
        max_length = context_length or DataConfig().max_length
    elif context_length is not None and max_length > context_length:
        problems.append(f"max_length={max_length} but the model reads at most {context_length} tokens (its context); "
                        f"set max_length={context_length} or less")
    if args.max_completion_length is not None and args.max_completion_length <= 0:
        problems.append(f"max_completion_length={args.max_completion_length}: give a positive number of tokens, or "
                        "None")
    return {"max_length": max_length, "separator": args.step_separator,
            "train_on_last_step_only": args.train_on_last_step_only}, problems


def _precision(args: PRMConfig, problems: list[str]) -> str:
    if args.use_cpu and available_device() != "cpu":
        problems.append(f"use_cpu=True: prmkit trains on the {available_device()} when there is one; hide it to train "
                        "on the CPU (CUDA_VISIBLE_DEVICES= for a GPU)")
    if args.precision_auto:
        return "auto"
    return "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"


def _report_to(args: PRMConfig) -> list[str]:
    value = args.report_to
    if value in (None, "none"):
        return []
    return [value] if isinstance(value, str) else [v for v in value if v != "none"]


def _choice(name: str, value, key: str, problems: list[str]) -> str | None:
    value = _value(value)
    allowed = typing.get_args(TrainingConfig.model_fields[key].annotation)
    if value in allowed:
        return value
    problems.append(f"{name}={value!r}: prmkit offers {', '.join(allowed)}; use one of them")
    return None


def _step_count(name: str, value, problems: list[str]) -> int:
    if value >= 1 and float(value).is_integer():
        return int(value)
    problems.append(f"{name}={value}: prmkit counts in whole optimizer steps (a value below 1, a ratio of the run, "
                    f"is not supported); give {name}=N")
    return 1


def _evaluation(args: PRMConfig, has_eval: bool, problems: list[str]) -> dict:
    strategy = _value(args.eval_strategy)
    if strategy == "no":
        return {}
    if not has_eval:
        problems.append(f"eval_strategy={strategy!r} needs an eval_dataset; pass one, or eval_strategy='no'")
        return {}
    if args.eval_delay:
        problems.append(f"eval_delay={args.eval_delay}: prmkit evaluates from the first eval step; remove it")
    if strategy == "epoch":
        return {"eval_steps": None}  # prmkit evaluates at each epoch end when eval_steps is unset
    return {"eval_steps": _step_count("eval_steps", args.eval_steps or args.logging_steps, problems)}


def _saving(args: PRMConfig, problems: list[str]) -> dict:
    strategy = _value(args.save_strategy)
    if strategy == "no":
        return {"save_steps": NEVER}
    if strategy != "steps":
        problems.append(f"save_strategy={strategy!r}: prmkit saves checkpoints every save_steps optimizer steps; use "
                        "save_strategy='steps' (or 'no') with save_steps=N")
        return {}
    return {"save_steps": _step_count("save_steps", args.save_steps, problems)}


def _best_metric(args: PRMConfig, has_eval: bool, problems: list[str]) -> str | None:
    if not args.load_best_model_at_end:
        return None
    metric = (args.metric_for_best_model or "loss").removeprefix("eval_")
    allowed = typing.get_args(typing.get_args(TrainingConfig.model_fields["best_metric"].annotation)[0])
    if metric not in allowed:
        problems.append(f"metric_for_best_model={args.metric_for_best_model!r}: prmkit keeps the best checkpoint by "
                        f"{', '.join(allowed)}; use one of them")
        return None
    if args.greater_is_better is not None and args.greater_is_better != (metric != "loss"):
        problems.append(f"greater_is_better={args.greater_is_better} with metric_for_best_model={metric!r}: prmkit "
                        "keeps the lowest loss and the highest AUROC; remove greater_is_better")
    if _value(args.eval_strategy) == "no" or not has_eval:
        problems.append("load_best_model_at_end=True needs evaluations during training: pass an eval_dataset and "
                        "eval_strategy='steps' with eval_steps dividing save_steps")
        return None
    return metric


def _value(value):
    """An enum's value (transformers turns strategy and name strings into enums), anything else as it is."""
    return getattr(value, "value", value)
