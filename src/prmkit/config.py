"""The typed run configuration: every default lives here, once.

A run is described by a YAML file plus `section.key=value` overrides (`prmkit train cfg.yaml training.lr=1e-4`).
Unknown keys are errors, and every problem of a config is reported at once, in the user's own spelling.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from prmkit.errors import PRMError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Section):
    base: str = Field("smollm2-135m", description="Alias, local folder, hub id, or a .gguf file")
    gguf_file: str | None = Field(None, description="GGUF file name inside `base` when base is a folder")
    trust_remote_code: bool = Field(False, description="Run code shipped with the model; off unless you trust it")
    allow_pickle: bool = Field(False, description="Load pickle weight files (pytorch_model.bin, *.pt); unpickling "
                               "can run code, so off unless you trust the files. Safetensors needs no opt-in")
    finetune: Literal["lora", "full"] = "lora"
    add_separator_token: bool = Field(False, description="Add data.separator to the vocabulary as one new token")
    attn_implementation: str | None = Field(None, description="e.g. sdpa, eager, flash_attention_2")
    num_layers: int | None = Field(None, gt=0, description="Keep only the first N transformer layers; the head reads "
                                   "layer N (none: all layers)")


class DataConfig(Section):
    train: str | None = None
    val: str | None = None
    val_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    max_length: int = Field(1024, gt=8)
    separator: str = "\n\n"
    label_scheme: Literal["auto", "binary", "ternary"] = "auto"
    neutral_label: Literal["positive", "negative", "ignore"] = "positive"
    train_on_last_step_only: bool = False
    skip_invalid: bool = False


class LoraSettings(Section):
    r: int = Field(16, gt=0)
    alpha: float = Field(32, gt=0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input; above 0 every adapted "
                           "layer keeps a masked copy of its input for the backward pass (more memory and time)")
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    top_layers: int | None = Field(None, gt=0, description="Adapt only the last N transformer layers: the backward "
                                   "pass stops there, so a step costs far less (none: every layer)")


class LossConfig(Section):
    type: Literal["mse", "bce"] = "bce"
    # Best-of-N compares samples of ONE problem, and a PRM trained on step labels alone learns largely which
    # problems are hard (high step AUROC pooled over problems, near chance within a problem); the ranking term
    # trains the comparison best-of-N makes.
    ranking_weight: float = Field(0.0, ge=0.0, description="Weight of a pairwise ranking term added to the step "
                                  "loss: for each right and wrong sample of the same prompt in a batch, "
                                  "-log sigmoid(score_right - score_wrong), averaged over the pairs; batches are then "
                                  "built from whole prompt groups. 0: the step loss alone")
    ranking_score: Literal["min", "last"] = Field("min", description="The chain score the ranking term compares, "
                                                  "over the chain's labelled steps, in logit space (the raw head "
                                                  "output): min (prmkit's default aggregation, the score best-of-N "
                                                  "ranks by) or last (the final step's)")


class TrainingConfig(Section):
    epochs: float = Field(1.0, gt=0)
    max_steps: int = Field(-1, description="Optimizer steps; overrides epochs when > 0")
    batch_size: int = Field(8, gt=0)
    eval_batch_size: int | None = Field(None, gt=0)
    gradient_accumulation_steps: int = Field(1, gt=0)
    lr: float = Field(1e-4, gt=0)
    scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts",
                       "polynomial", "inverse_sqrt"] = "linear"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, ge=0.0, description="0 disables clipping")
    # fused: one kernel over all parameters, no full-size temporaries (BENCHMARKS.md: the optimizer step of a full
    # fine-tune of SmolLM2 took 0.41x the time of the per-tensor-list adamw_torch, the run's peak RSS 0.11 GiB lower)
    optimizer: Literal["adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop"] = \
        "adamw_torch_fused"
    gradient_checkpointing: bool = False
    torch_compile: bool = Field(False, description="Compile the model with torch.compile (inductor): fused "
                                "element-wise kernels keep fewer activations and run faster, after a warm-up of "
                                "tens of seconds (cached for later runs); batch shapes are compiled dynamically, "
                                "so varying lengths do not recompile. Needs a C++ compiler on CPU, Triton on a GPU")
    head_init: Literal["random", "probe"] = Field("random", description="probe: fit the head on the frozen "
                                                  "backbone's step features before training (linear probe, then "
                                                  "fine-tune)")
    head_init_rows: int = Field(256, gt=0, description="Training chains the probe is fitted on")
    head_lr: float | None = Field(None, gt=0, description="Learning rate of the head (none: training.lr); lower it to "
                                  "keep a probe-fitted head where the probe put it")
    packing: bool = Field(False, description="Padding-free batches: a batch's chains are packed into rows up to its "
                          "longest chain, attention kept within each chain; checked against padded batches at "
                          "the start")
    best_metric: Literal["loss", "auroc", "within_problem_auroc", "within_problem_auroc_pooled"] | None = Field(
        None, description="Keep the checkpoint with the best validation value of this metric as the final model "
        "(lowest loss, highest AUROC); needs validation data and training.eval_steps dividing training.save_steps")
    seed: int = 42
    logging_steps: int = Field(10, gt=0)
    eval_steps: int | None = Field(None, gt=0, description="Evaluate every N steps; default: at each epoch end")
    save_steps: int = Field(500, gt=0)
    save_total_limit: int | None = Field(3, gt=0)
    report_to: list[str] = Field(default_factory=list, description="e.g. [tensorboard], [wandb]")
    resume: str | None = Field(None, description="'latest' or a checkpoint folder")
    dataloader_num_workers: int = Field(0, ge=0)
    # Off by default: same-length chains share their step count and so their mix of right and wrong steps; in four
    # paired runs of the demo's recipe grouped batches trained a worse PRM on average (step AUROC -0.009, first-error
    # accuracy -0.05; worse in 3 of 4 pairs; BENCHMARKS.md, "Length-grouped batches and quality"), though they cut
    # padding from ~23% to ~1% and trained LoRA 1.17x faster on PRM800K rows.
    group_by_length: bool = Field(False, description="Batch chains of similar length together (batches drawn at "
                                  "random from length-sorted groups of 50): less padding and faster, but a worse "
                                  "PRM in the measured runs; false: fully random batches")


class DistributedConfig(Section):
    fsdp: str = Field("", description="transformers' fsdp option, e.g. 'full_shard auto_wrap'")
    fsdp_config: dict[str, Any] = Field(default_factory=dict)
    deepspeed: str | dict[str, Any] | None = Field(None, description="DeepSpeed JSON file or inline dict")
    ddp_find_unused_parameters: bool | None = None

    @property
    def fsdp_flattens_parameters(self) -> bool:
        """FSDP version 1 without use_orig_params holds each wrapped module's weights as one flat tensor, so the
        optimizer sees no single weight (read as transformers reads fsdp_config: an `fsdp_` prefix is dropped,
        version 2 and use_orig_params true by default)."""
        settings = {key.removeprefix("fsdp_"): value for key, value in self.fsdp_config.items()}
        return bool(self.fsdp) and str(settings.get("version", 2)) == "1" \
            and str(settings.get("use_orig_params", True)).lower() == "false"


class Config(Section):
    output_dir: str = "runs"
    run_name: str = "prm"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    lora: LoraSettings = Field(default_factory=LoraSettings)
    loss: LossConfig = Field(default_factory=LossConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        problems = []
        if self.data.val and self.data.val_fraction:
            problems.append("data.val and data.val_fraction are both set; use one source of validation data")
        # Value-based, not "was the key written": a resolved config (`prmkit config`, RUN/config.yaml) lists every
        # key with its default and must load again as it is.
        if self.training.max_steps > 0 and self.training.epochs != TrainingConfig().epochs:
            problems.append("training.epochs and training.max_steps are both set; set one of them")
        if self.training.warmup_ratio and self.training.warmup_steps:
            problems.append("training.warmup_ratio and training.warmup_steps are both set; set one of them")
        if self.training.head_lr is not None and self.distributed.fsdp_flattens_parameters:
            problems.append(f"training.head_lr={self.training.head_lr} cannot be honoured under FSDP version 1 "
                            "with use_orig_params false: the head's weights are flattened into one tensor with "
                            "other weights, which has one learning rate; set distributed.fsdp_config.use_orig_params="
                            "true, or version 2 (the default), or remove training.head_lr")
        problems += self._ranking_problems()
        changed = {k for k, v in self.lora.model_dump().items() if v != LoraSettings().model_dump()[k]}
        if self.model.finetune == "full" and changed:
            keys = ", ".join(f"lora.{k}" for k in sorted(changed))
            problems.append(f"{keys} set but model.finetune is 'full'; remove them or use model.finetune=lora")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _ranking_problems(self) -> list[str]:
        problems = []
        weight, t = self.loss.ranking_weight, self.training
        if weight and t.packing:
            problems.append(f"loss.ranking_weight={weight} with training.packing=true: a packed row holds several "
                            "chains, and the ranking term reads one chain per row; set training.packing=false or "
                            "loss.ranking_weight=0")
        if weight and t.group_by_length:
            problems.append(f"loss.ranking_weight={weight} with training.group_by_length=true: the ranking term "
                            "batches the samples of one prompt together, length grouping would split them; set "
                            "training.group_by_length=false or loss.ranking_weight=0")
        if not weight and self.loss.ranking_score != LossConfig().ranking_score:
            problems.append(f"loss.ranking_score={self.loss.ranking_score} set but loss.ranking_weight is 0; set a "
                            "ranking weight (e.g. loss.ranking_weight=0.5) or remove loss.ranking_score")
        if t.best_metric is not None:
            if not (self.data.val or self.data.val_fraction):
                problems.append(f"training.best_metric={t.best_metric} needs validation data; set data.val or "
                                "data.val_fraction")
            if t.eval_steps is None or t.save_steps % t.eval_steps:
                problems.append(f"training.best_metric={t.best_metric} picks among the saved checkpoints, so each "
                                f"one must be evaluated: training.save_steps={t.save_steps} must be a multiple of "
                                f"training.eval_steps={t.eval_steps}; set e.g. training.eval_steps={t.save_steps}")
        return problems

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.run_name


def parse_overrides(overrides: list[str]) -> tuple[dict, list[str]]:
    """`a.b=value` strings -> nested dict; values are read as YAML scalars (numbers, booleans, lists)."""
    tree: dict = {}
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append(f"override '{item}': expected key=value, e.g. training.lr=1e-4")
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = tree
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                problems.append(f"override '{item}': '{part}' is not a section")
                break
        else:
            node[parts[-1]] = value
    return tree, problems


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Read YAML (optional) and apply overrides; raise PRMError listing every problem."""
    data: dict = {}
    problems: list[str] = []
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise PRMError(f"config file {path} not found; give the path of a YAML file")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise PRMError(f"{path}: not valid YAML ({err})") from None
        if not isinstance(data, dict):
            raise PRMError(f"{path}: expected a mapping of sections (model:, data:, ...), got {type(data).__name__}")
    tree, override_problems = parse_overrides(overrides or [])
    problems += override_problems
    _merge(data, tree)
    return build_config(data, problems, source=path)


def build_config(data: dict, problems: list[str] | None = None, *, source: str | Path | None = None) -> Config:
    """A Config from nested values (sections as dicts), as code builds one without a YAML file; raise PRMError
    listing every problem (`problems` found earlier included)."""
    problems = list(problems or [])
    try:
        config = Config.model_validate(data)
    except ValidationError as err:
        problems += [_describe(e) for e in err.errors()]
        config = None
    if problems:
        where = f" in {source}" if source else ""
        listed = "\n".join(f"  - {p}" for p in problems)
        raise PRMError(f"{len(problems)} problem(s) with the config{where}:\n{listed}")
    return config


def config_to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def _merge(base: dict, extra: dict) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _describe(error: dict) -> str:
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown key{_suggestion(error['loc'])}"
    if not key:
        return error["msg"].removeprefix("Value error, ")
    return f"{key}: {error['msg']} (got {error.get('input')!r})"


def _suggestion(loc: tuple) -> str:
    section: type[BaseModel] = Config
    for part in loc[:-1]:
        field = section.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        section = annotation
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1)
    prefix = ".".join(str(p) for p in loc[:-1])
    if close:
        return f"; did you mean {prefix + '.' if prefix else ''}{close[0]}?"
    return f"; valid keys here: {', '.join(section.model_fields)}"
