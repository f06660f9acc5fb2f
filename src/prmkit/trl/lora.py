"""TRL's `peft_config` -> prmkit's `lora` section. prmkit wraps the model with peft itself (the head is trained and
saved with the adapter, see `prmkit.model.apply_lora`), so a LoraConfig is read for its settings, field by field;
one prmkit cannot reproduce is refused by name."""

from __future__ import annotations

# LoraConfig fields prmkit carries over: r, lora_alpha, lora_dropout, target_modules, layers_to_transform (the last
# N layers). These are peft's bookkeeping or say what prmkit does anyway: a token-classification task, the head
# saved beside the adapter.
IGNORED = {"r", "lora_alpha", "lora_dropout", "target_modules", "layers_to_transform", "peft_type", "peft_version",
           "task_type", "base_model_name_or_path", "revision", "inference_mode", "modules_to_save", "auto_mapping"}
HEAD_MODULES = ({"score"}, {"classifier"}, {"score", "classifier"})
TASK_TYPES = (None, "TOKEN_CLS")


def lora_config(peft_config, *, model_type: str | None, num_layers: int | None) -> tuple[dict, list[str]]:
    """The `lora` section for `peft_config` (a peft LoraConfig) on a backbone of `model_type` with `num_layers`
    layers, and the problems: settings prmkit cannot honour, each named with what to use instead."""
    from peft import LoraConfig

    if not isinstance(peft_config, LoraConfig):
        return {}, [f"peft_config={type(peft_config).__name__}: prmkit trains LoRA adapters (peft.LoraConfig) or the "
                    "full model (peft_config=None)"]
    problems = []
    default = LoraConfig()
    for name in sorted(vars(default)):
        if name in IGNORED or name.startswith("_"):
            continue
        value, plain = getattr(peft_config, name, None), getattr(default, name)
        if value != plain:
            problems.append(f"peft_config.{name}={value!r}: prmkit's LoRA has no such setting (it trains plain LoRA "
                            "on r, lora_alpha, lora_dropout, target_modules and the last layers); remove it")
    task = getattr(peft_config.task_type, "value", peft_config.task_type)
    if task not in TASK_TYPES:
        problems.append(f"peft_config.task_type={task!r}: a PRM is a token-classification model; use "
                        "task_type='TOKEN_CLS' (or leave it unset)")
    saved = peft_config.modules_to_save
    if saved and set(saved) not in HEAD_MODULES:
        problems.append(f"peft_config.modules_to_save={saved!r}: prmkit trains and saves the head (score or "
                        "classifier) with the adapter and nothing else in full; remove modules_to_save")
    section = {"r": peft_config.r, "alpha": peft_config.lora_alpha, "dropout": peft_config.lora_dropout,
               "target_modules": _targets(peft_config.target_modules, model_type, problems)}
    top = _top_layers(peft_config.layers_to_transform, num_layers, problems)
    if top is not None:
        section["top_layers"] = top
    return section, problems


def _targets(targets, model_type: str | None, problems: list[str]):
    if targets is None:  # peft's choice for this architecture, as TRL (through peft) would have made it
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

        if model_type in DEFAULTS:
            return list(DEFAULTS[model_type])
        problems.append(f"peft_config.target_modules=None: peft has no default modules for model type {model_type!r}; "
                        "name them (e.g. ['q_proj', 'v_proj']) or use 'all-linear'")
        return "all-linear"
    if targets == "all-linear":
        return targets
    if isinstance(targets, str):
        problems.append(f"peft_config.target_modules={targets!r}: prmkit takes a list of module names or "
                        "'all-linear', not a pattern; list the names")
        return "all-linear"
    return sorted(targets)


def _top_layers(layers, num_layers: int | None, problems: list[str]) -> int | None:
    """peft's layers_to_transform as prmkit's lora.top_layers, which adapts the last N layers only."""
    if layers is None:
        return None
    layers = [layers] if isinstance(layers, int) else sorted(layers)
    if num_layers is not None and layers and layers == list(range(num_layers - len(layers), num_layers)):
        return len(layers)
    problems.append(f"peft_config.layers_to_transform={layers!r}: prmkit adapts the last N layers only "
                    f"(lora.top_layers); give the last layers of the {num_layers or '?'} (e.g. "
                    f"{list(range((num_layers or 2) - 2, num_layers or 2))}) or remove it")
    return None
