"""`PRMTrainer`: TRL 1.13's PRMTrainer, constructor and methods, training through prmkit's own engine.

The constructor maps every argument onto prmkit's typed config (refusing, all together and by name, what prmkit
cannot honour), writes the starting model and the rows where a prmkit run reads them from (see `models` and
`datasets`), and `train()` runs `prmkit.training.trainer.train` on that config, as `prmkit train` does: the
output_dir becomes a prmkit run folder that every prmkit command reads (PRMScorer, prmkit score / eval / search /
serve / export), with the checkpoints, config.yaml and summary.json of any prmkit run.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from transformers import AutoConfig, DataCollatorForTokenClassification, TrainerState
from transformers.trainer_utils import TrainOutput

from prmkit.config import Config, build_config
from prmkit.errors import PRMError
from prmkit.model import context_length, layer_count_key, load_prm, load_token_classifier
from prmkit.training.trainer import train as prmkit_train
from prmkit.trl.arguments import data_config, in_trl_terms, refused_fields, training_config
from prmkit.trl.config import PRMConfig
from prmkit.trl.datasets import cut_completions, dataset_rows, rows_file
from prmkit.trl.evaluation import evaluate_rows
from prmkit.trl.lora import lora_config
from prmkit.trl.models import prepare_base


class PRMTrainer:
    """TRL's `PRMTrainer(model, args, data_collator, train_dataset, eval_dataset, processing_class, model_init,
    compute_metrics, callbacks, optimizers, preprocess_logits_for_metrics, peft_config)`; see docs/trl.md."""

    def __init__(self, model=None, args: PRMConfig | None = None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, model_init=None, compute_metrics=None, callbacks=None,
                 optimizers=(None, None), preprocess_logits_for_metrics=None, peft_config=None):
        if train_dataset is None:
            raise PRMError("train_dataset is required: a Dataset with prompt, completions and labels columns")
        if model is None:
            raise PRMError("model is required: a model object, a local model folder, a prmkit alias or a hub id"
                           + (" (prmkit takes no model_init)" if model_init is not None else ""))
        args = PRMConfig() if args is None else args
        if not isinstance(args, PRMConfig):
            raise PRMError(f"args={type(args).__name__}: use prmkit.trl.PRMConfig (TRL's PRMConfig fields, the same "
                           "names and defaults), e.g. PRMConfig(output_dir=...)")
        # Cheap checks first, so a refused argument never waits for the model to be written.
        problems = _refused_arguments(data_collator=data_collator, model_init=model_init,
                                      compute_metrics=compute_metrics, optimizers=optimizers,
                                      preprocess_logits_for_metrics=preprocess_logits_for_metrics)
        problems += refused_fields(args)
        train_rows = dataset_rows(train_dataset, "train_dataset")
        eval_rows = dataset_rows(eval_dataset, "eval_dataset")
        tree, found = training_config(args, has_eval=bool(eval_rows))
        _raise(problems + found)
        if args.dataset_num_proc:
            print(f"prmkit: dataset_num_proc={args.dataset_num_proc}: prmkit tokenizes in this process; the rows are "
                  "the same", file=sys.stderr, flush=True)

        self.args = args
        self.callbacks = list(callbacks or ())  # run beside prmkit's own, as TRL's Trainer runs them
        self.base = prepare_base(model, processing_class, disable_dropout=args.disable_dropout)
        if self.base.converted:
            print(f"prmkit: model: {self.base.converted}; a step's score stays P(label 1)", file=sys.stderr, flush=True)
        base_config = AutoConfig.from_pretrained(self.base.path)
        data, found = data_config(args, context_length=context_length(base_config))
        problems = found
        lora = {}
        if peft_config is not None:
            key = layer_count_key(base_config)
            lora, found = lora_config(peft_config, model_type=base_config.model_type,
                                      num_layers=getattr(base_config, key) if key else None)
            problems += found
        _raise(problems)

        cut = dict(separator=args.step_separator, limit=args.max_completion_length,
                   last_step_only=args.train_on_last_step_only)
        train_rows, _ = cut_completions(train_rows, self.base.tokenizer, **cut)
        self.eval_rows, _ = cut_completions(eval_rows, self.base.tokenizer, **cut)
        if not train_rows:
            raise PRMError(f"no train_dataset row has a step within max_completion_length={args.max_completion_length}"
                           "; raise it or set it to None")
        # eval_strategy='no' (TRL's default) evaluates only when asked (trainer.evaluate()), so the run gets no
        # validation data; otherwise the rows are the run's data.val.
        evaluating = bool(self.eval_rows) and getattr(args.eval_strategy, "value", args.eval_strategy) != "no"
        data.update(train=rows_file(train_rows, "train"), val=rows_file(self.eval_rows, "eval") if evaluating else None)
        tree.update(model={"base": self.base.path, "finetune": "lora" if peft_config is not None else "full"},
                    data=data, loss={"type": "bce"})
        if lora:
            tree["lora"] = lora
        self.config = _config(tree)
        if self.base.converted and not self.config.distributed.fsdp_flattens_parameters:
            # TRL's two head rows get equal and opposite gradients, so Adam moves each by the learning rate and the
            # logit they make (row 1 - row 0) by twice it; the one-logit head at twice the rate takes TRL's steps
            tree["training"]["head_lr"] = 2 * args.learning_rate
            self.config = _config(tree)
        self.processing_class = self.base.tokenizer
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.summary = None
        self._model = None

    def train(self, resume_from_checkpoint: bool | str | None = None, trial=None, ignore_keys_for_eval=None,
              **kwargs) -> TrainOutput:
        """Train as configured; `resume_from_checkpoint=True` continues from the newest checkpoint in output_dir, a
        path from that checkpoint (the run keeps the settings it started with; only its length and how it is
        logged, saved and evaluated may change)."""
        if trial is not None or kwargs:
            raise PRMError(f"train({', '.join(['trial'] * (trial is not None) + sorted(kwargs))}=...): prmkit has no "
                           "hyperparameter search; call train() or train(resume_from_checkpoint=...)")
        resume = "latest" if resume_from_checkpoint is True else \
            str(resume_from_checkpoint) if resume_from_checkpoint else None
        run_dir = self.config.run_dir
        if not resume and run_dir.is_dir() and any(run_dir.iterdir()):
            raise PRMError(f"output_dir {run_dir} already holds files (an earlier run); continue that run with "
                           "trainer.train(resume_from_checkpoint=True), or remove the folder, or choose another "
                           "output_dir")
        config = _config({**self.config.model_dump(), "training": {**self.config.training.model_dump(),
                                                                   "resume": resume}})
        try:
            self.summary = prmkit_train(config, callbacks=self.callbacks)
        except PRMError as err:
            raise in_trl_terms(err) from None
        self._model = None
        metrics = {"train_runtime": self.summary.duration_s, "train_loss": self._mean_train_loss()}
        return TrainOutput(global_step=self.summary.optimizer_steps, training_loss=metrics["train_loss"],
                           metrics=metrics)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """prmkit's validation metrics (eval_loss, eval_accuracy, eval_auroc, ...) of the trained model, or of the
        starting model before train()."""
        rows = self.eval_rows
        if eval_dataset is not None:
            rows, _ = cut_completions(dataset_rows(eval_dataset, "eval_dataset"), self.base.tokenizer,
                                      separator=self.args.step_separator, limit=self.args.max_completion_length,
                                      last_step_only=self.args.train_on_last_step_only)
        if not rows:
            raise PRMError("evaluate() needs rows: pass eval_dataset to PRMTrainer or to evaluate()")
        try:
            return evaluate_rows(self.config, rows, trained=self._trained, metric_key_prefix=metric_key_prefix)
        except PRMError as err:
            raise in_trl_terms(err) from None

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The trained model is already in output_dir (a prmkit run folder); another folder gets a copy of it that
        scores on its own (weights, tokenizer, prmkit.json)."""
        if not self._trained:
            raise PRMError("save_model() before train(): prmkit writes the model into output_dir when training ends; "
                           "call trainer.train() first")
        run_dir = self.config.run_dir
        target = Path(output_dir).expanduser().resolve() if output_dir else run_dir
        if target == run_dir:
            return
        target.mkdir(parents=True, exist_ok=True)
        for path in run_dir.iterdir():
            if path.is_file():
                shutil.copy2(path, target / path.name)

    def push_to_hub(self, *args, **kwargs):
        raise PRMError(f"push_to_hub: export the run with `prmkit export {self.config.run_dir} --merge OUT "
                       "--hub-id OWNER/NAME`, which writes a model card and prints the `hf upload` command")

    @property
    def model(self):
        """The trained model (after train()), else the model training starts from (one output per token)."""
        if self._model is None:
            self._model = load_prm(self.config.run_dir)[0] if self._trained else \
                load_token_classifier(self.base.path)
        return self._model

    @property
    def state(self) -> TrainerState:
        """The run's TrainerState (log_history included), read from output_dir."""
        path = self.config.run_dir / "trainer_state.json"
        return TrainerState.load_from_json(str(path)) if path.is_file() else TrainerState()

    @property
    def _trained(self) -> bool:
        return (self.config.run_dir / "prmkit.json").is_file()

    def _mean_train_loss(self) -> float | None:
        history = self.state.log_history
        return next((entry["train_loss"] for entry in reversed(history) if "train_loss" in entry), None)


def _refused_arguments(**given) -> list[str]:
    """Constructor arguments prmkit cannot honour, each with what to use instead."""
    problems = []
    collator = given["data_collator"]
    # TRL's own default collator is what prmkit's StepCollator does (right padding, labels ignored on padding).
    if collator is not None and type(collator) is not DataCollatorForTokenClassification:
        problems.append(f"data_collator={type(collator).__name__}: prmkit batches with its own collator (float "
                        "labels, so soft labels survive); remove data_collator")
    if given["model_init"] is not None:
        problems.append("model_init: prmkit has no hyperparameter search; pass the model itself")
    if given["compute_metrics"] is not None:
        problems.append("compute_metrics: prmkit's evaluation reports loss, accuracy, auroc, precision/recall/F1 and "
                        "calibration of the steps; for other metrics score the rows with "
                        "PRMScorer.from_pretrained(output_dir) or run `prmkit eval OUTPUT_DIR DATA`")
    if any(x is not None for x in given["optimizers"] or ()):
        problems.append("optimizers: prmkit builds the optimizer and schedule itself; choose them with args.optim, "
                        "args.lr_scheduler_type, args.learning_rate and args.warmup_steps")
    if given["preprocess_logits_for_metrics"] is not None:
        problems.append("preprocess_logits_for_metrics: prmkit's evaluation keeps one score per token itself; "
                        "remove it")
    return problems


def _raise(problems: list[str]) -> None:
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise PRMError(f"PRMTrainer: {len(problems)} argument(s) prmkit cannot honour:\n{listed}")


def _config(tree: dict) -> Config:
    try:
        return build_config(json.loads(json.dumps(tree, default=str)))
    except PRMError as err:
        raise in_trl_terms(err) from None
