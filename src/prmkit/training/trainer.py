"""`prmkit train`: config in, a run folder out (final model, checkpoints, metadata, summary).

Built on the transformers Trainer, so DDP/FSDP/DeepSpeed, logging integrations, checkpointing and resume come
from the engine. prmkit supplies the data pipeline, the PRM model, the masked step loss and the metadata that
makes every checkpoint scorable.
"""

from __future__ import annotations

import pickle
import time
from functools import partial
from pathlib import Path
from typing import Sequence

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed

from prmkit.backbones import resolve_base
from prmkit.config import Config, DistributedConfig, config_to_yaml
from prmkit.data.io import load_records
from prmkit.device import Precision, check_compilable, compile_failure, raised_while_compiling, resolve_precision
from prmkit.errors import PRMError
from prmkit.files import write_json_atomic, write_text_atomic
from prmkit.loss import step_loss
from prmkit.model import (
    PRMMetadata,
    add_separator_token,
    apply_lora,
    base_context_length,
    head_name,
    load_token_classifier,
    load_tokenizer,
    parameter_counts,
    refuse_pickle_weights,
    refused_object,
)
from prmkit.tokenize import StepCollator, TokenizationStats, tokenize_records
from prmkit.training.checkpoints import AtomicCheckpoints, checkpoint_to_resume, save_final_model
from prmkit.training.engine import (
    check_attention_precision,
    check_deepspeed_saves_weights,
    check_weights_saved,
    check_wrapping,
    forward_autocast,
    uses_flash_attention,
)
from prmkit.training.head_init import init_head_from_probe, set_head
from prmkit.training.packing import REAL_TOKENS, PackedStepCollator, check_packing_supported
from prmkit.training.progress import show_training_progress
from prmkit.training.ranking import SiblingRanking
from prmkit.training.run_folder import (
    CONFIG_FILE,
    check_free_space,
    is_main_process,
    prepare_run_dir,
    resume_changes,
)
from prmkit.training.siblings import SiblingCollator, Siblings, check_rankable, sibling_groups
from prmkit.training.summary import RunSummary
from prmkit.training.validation import check_best_metric, keep_head_output, make_compute_metrics


class ChainDataset(torch.utils.data.Dataset):
    """Tokenized chains as plain Python lists: nothing casts the float labels on the way to the collator. With
    `siblings` each row carries its prompt group and outcome, for the ranking term."""

    def __init__(self, chains, siblings: Siblings | None = None):
        self.rows = [{"input_ids": c.input_ids, "labels": c.labels} for c in chains]
        if siblings is not None:
            for row, group, correct in zip(self.rows, siblings.groups, siblings.correct):
                row.update(group=group, correct=correct)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


class PRMTrainer(AtomicCheckpoints, SiblingRanking, Trainer):
    """Writes each checkpoint atomically with prmkit.json inside, so every `checkpoint-N` scores on its own; counts
    the real (non-padding) tokens it trains on, for an honest tokens/s; refuses to train a model the engine did not
    wrap as `distributed` asks; adds the ranking term where `ranking_weight` > 0 (SiblingRanking)."""

    trained_tokens = 0
    padded_tokens = 0

    def __init__(self, *args, metadata: PRMMetadata, head_lr: float | None = None,
                 distributed: DistributedConfig | None = None, ranking_weight: float = 0.0,
                 ranking_score: str = "min", train_siblings: Siblings | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.metadata = metadata
        self.head_lr = head_lr
        self.distributed = distributed or DistributedConfig()
        self.ranking_weight, self.ranking_score, self.train_siblings = ranking_weight, ranking_score, train_siblings

    def _build_accelerator_args(self, **kwargs):
        """With training.torch_compile, batch shapes are symbolic from the first compilation: chains vary in
        length, and torch.compile's default would compile the first batch's shape, then compile again, dynamic,
        at the second shape; starting dynamic saves that second warm-up. And the model is compiled by regions: the
        decoder layer, which every layer shares, is compiled once and reused, so the first step waits for one
        layer's compilation rather than the whole model's (6x sooner on SmolLM2-135M, at the same step time:
        BENCHMARKS.md, "Compiled training")."""
        args = super()._build_accelerator_args(**kwargs)
        plugin = args.get("dynamo_plugin")
        if self.args.torch_compile and plugin is not None:
            plugin.dynamic = True
            plugin.use_regional_compilation = True
        return args

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        """The engine wraps the model here (DDP, FSDP, DeepSpeed); what it made is checked before the first step."""
        model, train_dataloader = super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)
        check_wrapping(self.distributed, distributed_type(self.args), wrapped=model)
        return model, train_dataloader

    def create_optimizer(self, model=None):
        """The engine's optimizer, with the head's parameters in groups of their own at `training.head_lr`. Adam
        moves every weight by about the learning rate per step whatever its gradient, so a head fitted as a probe
        (already at its optimum, with small weights) is shaken loose by a learning rate meant for the adapters."""
        optimizer = super().create_optimizer(model)
        if self.head_lr is not None:
            head = head_name(self.model)  # a peft model answers for the model it wraps
            head_ids = {id(p) for n, p in self.model.named_parameters() if head in n.split(".")}
            moved_any = False
            for group in list(optimizer.param_groups):
                moved = [p for p in group["params"] if id(p) in head_ids]
                if moved:
                    moved_any = True
                    group["params"] = [p for p in group["params"] if id(p) not in head_ids]
                    optimizer.add_param_group({**{k: v for k, v in group.items() if k != "params"},
                                               "params": moved, "lr": self.head_lr})
            optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
            if not moved_any:
                raise PRMError(f"training.head_lr={self.head_lr}: no weight of the head '{head}' is among the "
                               "optimizer's parameters, so it cannot have a learning rate of its own (an engine "
                               "that flattens weights, as FSDP version 1 without use_orig_params does, hides it); "
                               "remove training.head_lr or let the engine keep the weights apart")
        return optimizer

    def write_extras(self, folder: Path) -> None:
        check_weights_saved(folder)  # prmkit.json marks a folder as scorable: never beside weights that do not load
        self.metadata.save(folder)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        real_tokens = inputs.pop(REAL_TOKENS, None)  # packed batches say how many tokens are real
        if model.training:
            mask = inputs.get("attention_mask")
            self.trained_tokens += int(real_tokens) if real_tokens is not None else int(mask.sum())
            self.padded_tokens += inputs["input_ids"].numel()
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)


class FinalStepFlow(TrainerCallback):
    """The end of a run: the final model is written first, then evaluated once (in `train`), so a crash or a
    pre-emption during that evaluation loses no training.

    At the last optimizer step transformers would evaluate (eval_steps, and again at the epoch end) before any save,
    and save a checkpoint there even off the `save_steps` grid. Both are turned off for that step: the final model
    written right after training holds the same weights (an off-grid checkpoint would only repeat it, with optimizer
    state: three times the weights for a full fine-tune), and `train` evaluates those weights once. Checkpoints on
    the `save_steps` grid are kept as they are.

    With `training.best_metric` the last step is evaluated and saved as transformers does: the final weights must
    compete with the earlier checkpoints, and the best of them becomes the final model."""

    def __init__(self, best_metric: str | None = None):
        self.best_metric = best_metric

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps and not self.best_metric:
            control.should_evaluate = False
            if state.global_step % args.save_steps:
                control.should_save = False
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps and not self.best_metric:
            control.should_evaluate = False
        return control


def loss_function(loss_type: str, outputs, labels, num_items_in_batch=None):
    return step_loss(loss_type, outputs["logits"].squeeze(-1), labels, num_items_in_batch)


def distributed_type(args: TrainingArguments) -> str:
    """accelerate's name for the launch (NO, MULTI_CPU, MULTI_GPU, DEEPSPEED, FSDP, ...)."""
    kind = args.distributed_state.distributed_type
    return getattr(kind, "value", str(kind))


def training_arguments(config: Config, run_dir: Path, has_eval: bool,
                       precision: Precision | None = None) -> TrainingArguments:
    t, d = config.training, config.distributed
    precision = precision or resolve_precision(config.precision)
    warmup = t.warmup_ratio if t.warmup_ratio else t.warmup_steps
    return TrainingArguments(
        output_dir=str(run_dir), run_name=config.run_name,
        num_train_epochs=t.epochs, max_steps=t.max_steps,
        per_device_train_batch_size=t.batch_size, per_device_eval_batch_size=t.eval_batch_size or t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        learning_rate=t.lr, lr_scheduler_type=t.scheduler, warmup_steps=warmup,
        weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm, optim=t.optimizer,
        activation_checkpointing=t.gradient_checkpointing, torch_compile=t.torch_compile,
        activation_checkpointing_kwargs={"use_reentrant": False} if t.gradient_checkpointing else None,
        seed=t.seed, data_seed=t.seed,
        logging_steps=t.logging_steps, logging_first_step=True,
        eval_strategy=("steps" if t.eval_steps else "epoch") if has_eval else "no", eval_steps=t.eval_steps,
        # held-out metrics of the starting head, for the summary; a resumed run starts from trained weights
        eval_on_start=has_eval and t.head_init == "probe" and not t.resume,
        save_strategy="steps", save_steps=t.save_steps, save_total_limit=t.save_total_limit,
        load_best_model_at_end=bool(t.best_metric) and has_eval,
        metric_for_best_model=t.best_metric if has_eval else None,
        report_to=t.report_to or "none", dataloader_num_workers=t.dataloader_num_workers,
        train_sampling_strategy="group_by_length" if t.group_by_length else "random",
        bf16=precision.bf16, fp16=precision.fp16, use_cpu=precision.device == "cpu",
        fsdp=d.fsdp, fsdp_config=d.fsdp_config or None, deepspeed=d.deepspeed,
        ddp_find_unused_parameters=d.ddp_find_unused_parameters,
        label_names=["labels"], remove_unused_columns=False, prediction_loss_only=False,
    )


def load_splits(config: Config):
    """Train and validation records plus their validation reports."""
    if not config.data.train:
        raise PRMError("data.train is not set; give a training file, e.g. data.train=train.jsonl")
    options = dict(scheme=config.data.label_scheme, neutral=config.data.neutral_label,
                   skip_invalid=config.data.skip_invalid)
    train_records, train_report = load_records(config.data.train, **options)
    reports = [train_report]
    val_records: list[dict] = []
    if config.data.val:
        # one label scheme for the run: a validation file without -1 must not read a 0 as wrong when training
        # read it as a neutral rating
        val_records, val_report = load_records(config.data.val, **{**options, "scheme": train_report.scheme})
        reports.append(val_report)
    elif config.data.val_fraction:
        from prmkit.data.stats import split_records

        train_records, val_records = split_records(train_records, config.data.val_fraction, config.training.seed)
    if not train_records:
        raise PRMError(f"{config.data.train}: no valid training rows left")
    return train_records, val_records, reports


def check_context_length(config: Config, base_path: str) -> None:
    """Refuse a data.max_length the backbone cannot read: past its context a learned position table has no entry
    (an index error mid-run) and rotary positions were never trained on."""
    limit = base_context_length(base_path, config.model.trust_remote_code)
    if limit is not None and config.data.max_length > limit:
        raise PRMError(f"data.max_length={config.data.max_length} but the backbone {config.model.base} reads at most "
                       f"{limit} tokens (its context); set data.max_length={limit} or less")


def train(config: Config, *, overwrite: bool = False, fitted_head: dict | None = None,
          callbacks: Sequence[TrainerCallback] = ()) -> RunSummary:
    """Train a PRM as `config` says; returns the run summary (also in RUN/summary.json). `fitted_head`, the result
    of `init_head_from_probe` on the same backbone and chains, saves fitting the probe again (the demo fits it
    first to show where training starts). `callbacks`: transformers TrainerCallbacks (classes or instances) run
    beside prmkit's own, as a Trainer's `callbacks` argument runs them."""
    set_seed(config.training.seed)
    # Data and backbone problems are found before the run folder is touched, so a failed start leaves nothing behind.
    train_records, val_records, reports = load_splits(config)
    ranking, val_source = config.loss.ranking_weight, config.data.val or f"{config.data.train} (data.val_fraction)"
    if ranking:
        check_rankable(sibling_groups(train_records, config.data.train), config.data.train, ranking)
    check_best_metric(config.training.best_metric, sibling_groups(val_records, val_source), val_source)
    base_path = resolve_base(config.model.base, config.model.gguf_file)
    check_context_length(config, base_path)
    precision = resolve_precision(config.precision)
    check_attention_precision(config.model.attn_implementation, precision)
    if config.training.torch_compile:
        check_compilable(precision.device, "training.torch_compile")
    check_deepspeed_saves_weights(config)
    args = training_arguments(config, config.run_dir, has_eval=bool(val_records), precision=precision)
    # Asking the engine's arguments for their device joins the process group under a launcher; the run folder is
    # then prepared by the main process while the others wait.
    device = args.device
    check_wrapping(config.distributed, distributed_type(args))  # FSDP where accelerate would not shard
    run_dir = prepare_run_dir(config, overwrite=overwrite)
    resume_from = checkpoint_to_resume(config.training.resume, run_dir)
    resumed_with = resume_changes(config, resume_from) if resume_from else {}
    if resume_from:
        refuse_pickle_weights(resume_from, config.model.allow_pickle)

    tokenizer = load_tokenizer(base_path, config.model.trust_remote_code)
    model = load_token_classifier(base_path, trust_remote_code=config.model.trust_remote_code,
                                  attn_implementation=config.model.attn_implementation,
                                  allow_pickle=config.model.allow_pickle, num_layers=config.model.num_layers)
    added = add_separator_token(model, tokenizer, config.data.separator) if config.model.add_separator_token else []
    model.config.pad_token_id = tokenizer.pad_token_id

    tokenize = partial(tokenize_records, tokenizer, separator=config.data.separator,
                       max_length=config.data.max_length, train_on_last_step_only=config.data.train_on_last_step_only)
    train_chains, train_stats = tokenize(train_records)
    val_chains, val_stats = tokenize(val_records) if val_records else ([], TokenizationStats())
    if not train_chains:
        raise PRMError(f"no training row has a labelled step within data.max_length={config.data.max_length} "
                       f"({train_stats.drop_reasons}); raise data.max_length or check the labels")
    if val_records and not val_chains:  # the engine was told to evaluate, on validation rows none of which fits
        raise PRMError(f"no validation row has a labelled step within data.max_length={config.data.max_length} "
                       f"({val_stats.drop_reasons}); raise data.max_length or check the validation data")
    # checked again on the chains: max_length may cut the only pairs
    train_siblings = sibling_groups(train_records, config.data.train, train_chains) if ranking else None
    if train_siblings is not None:
        check_rankable(train_siblings, config.data.train, ranking)
    val_siblings = sibling_groups(val_records, val_source, val_chains) if val_chains else None
    check_best_metric(config.training.best_metric, val_siblings, val_source)

    if config.training.head_init == "probe" and not resume_from:  # a resumed run has its trained head
        if fitted_head is not None:
            set_head(model, fitted_head["weight"], fitted_head["bias"])
            fitted = fitted_head
        else:
            with forward_autocast(precision):
                fitted = init_head_from_probe(model.to(device), train_chains, tokenizer.pad_token_id,
                                              config.loss.type, config.training.head_init_rows)
        if is_main_process():
            print(f"prmkit: head fitted as a linear probe on {fitted['steps']} labelled steps of {fitted['chains']} "
                  "training chains", flush=True)
    if config.model.finetune == "lora":
        new_ids = tokenizer.convert_tokens_to_ids(added) if added else []
        model = apply_lora(model, r=config.lora.r, alpha=config.lora.alpha, dropout=config.lora.dropout,
                           target_modules=config.lora.target_modules, new_token_ids=new_ids,
                           top_layers=config.lora.top_layers)
    if config.training.packing:
        if uses_flash_attention(config.model.attn_implementation):
            model.to(device)  # flash-attention runs on a GPU only; elsewhere the check runs where the model is
        with forward_autocast(precision):
            check_packing_supported(model, train_chains, tokenizer.pad_token_id)
    trainable, total = parameter_counts(model)
    check_free_space(run_dir, saved_params=total if config.model.finetune == "full" else trainable,
                     trainable_params=trainable, checkpoints_kept=config.training.save_total_limit)

    metadata = PRMMetadata.from_config(config, base_path, label_scheme=reports[0].scheme, added_tokens=added)
    collator = PackedStepCollator(tokenizer.pad_token_id) if config.training.packing \
        else StepCollator(tokenizer.pad_token_id)
    trainer = PRMTrainer(
        model=model, args=args, train_dataset=ChainDataset(train_chains, train_siblings),
        eval_dataset=ChainDataset(val_chains) if val_chains else None,
        data_collator=SiblingCollator(collator) if ranking else collator, processing_class=tokenizer,
        compute_loss_func=partial(loss_function, config.loss.type),
        compute_metrics=make_compute_metrics(config.loss.type, val_siblings),
        preprocess_logits_for_metrics=keep_head_output,
        metadata=metadata, head_lr=config.training.head_lr, distributed=config.distributed,
        ranking_weight=ranking, ranking_score=config.loss.ranking_score, train_siblings=train_siblings,
        callbacks=[FinalStepFlow(config.training.best_metric), *callbacks],
    )
    show_training_progress(trainer)  # a bar on a terminal, a line per logging step in a log
    # config.yaml stays the config the run started with: every resume is checked against it, and summary.json lists
    # what a resume changed (resume_changes)
    if is_main_process() and not (resume_from and (run_dir / CONFIG_FILE).is_file()):
        write_text_atomic(run_dir / CONFIG_FILE, config_to_yaml(config))

    if config.training.torch_compile and is_main_process():
        print("prmkit: training.torch_compile: the model is compiled at the first step, which waits for it (tens of "
              "seconds on a CPU; compiled kernels are cached for later runs)", flush=True)
    started = time.perf_counter()
    steps_before = trainer.state.global_step
    try:
        result = trainer.train(resume_from_checkpoint=resume_from)
    except pickle.UnpicklingError as err:  # transformers reads optimizer/scheduler/rng files with weights_only=True
        raise PRMError(f"training.resume={resume_from}: a file in this checkpoint holds more than tensors, and "
                       f"nothing is unpickled beyond tensors ({refused_object(err)}). Resume only from "
                       "checkpoints your own runs wrote") from None
    except Exception as err:
        if config.training.torch_compile and raised_while_compiling(err):
            trained = trainer.state.global_step - steps_before
            raise PRMError(f"training.torch_compile: torch.compile failed on this model "
                           f"({compile_failure(err)}) after {trained} optimizer step(s) of "
                           "this launch; set training.torch_compile=false"
                           f"{' and training.resume=latest to go on from the last checkpoint' if trained else ''}"
                           ) from err
        raise
    duration = time.perf_counter() - started
    save_final_model(trainer, run_dir, tokenizer, metadata)  # before the evaluation: see FinalStepFlow
    eval_metrics = trainer.evaluate() if val_chains else {}
    trainer.save_state()  # trainer_state.json in the run folder: the full log history, final evaluation included
    # Each process counted its own shard's tokens; the run's throughput is their sum.
    trained_tokens, batch_tokens = (int(x) for x in trainer.accelerator.reduce(
        torch.tensor([trainer.trained_tokens, trainer.padded_tokens], device=trainer.args.device), "sum"))
    summary = RunSummary.build(
        config=config, run_dir=run_dir, log_history=trainer.state.log_history, global_step=result.global_step,
        duration_s=duration, trained_tokens=trained_tokens, batch_tokens=batch_tokens, trainable_params=trainable,
        total_params=total,
        train_stats=train_stats, val_stats=val_stats, reports=reports, eval_metrics=eval_metrics,
        resumed_from=resume_from, resume_changes=resumed_with, best_checkpoint=trainer.state.best_model_checkpoint,
    )
    if is_main_process():
        write_json_atomic(run_dir / "summary.json", summary.as_dict())
    return summary
