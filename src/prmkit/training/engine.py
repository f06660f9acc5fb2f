"""What prmkit checks of the training engine (transformers' Trainer on accelerate) instead of trusting it.

The engine takes `distributed.*`, `precision` and the attention implementation as options, and some combinations
it accepts without doing what they say: FSDP asked on CPU processes trains with DDP, a ZeRO-3 full fine-tune saves
no loadable weights, flash-attention meets fp32 inputs in the forwards prmkit runs before training. Each check here
refuses such a run with the reason, before training where the config alone tells, otherwise as soon as the engine
has acted (wrapped the model, saved a folder).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch

from prmkit.config import Config, DistributedConfig
from prmkit.device import Precision
from prmkit.errors import PRMError

# What a transformers or peft save writes as weights; a folder with none of them does not load.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin")
# accelerate 1.16's AcceleratorState turns a launch into FSDP only from these distributed types; from any other
# (MULTI_CPU: processes on CPU; NO: one process) it leaves the FSDP plugin unused and wraps the model in DDP, or not
# at all.
FSDP_DISTRIBUTED_TYPES = ("MULTI_GPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_NPU", "MULTI_XPU",
                          "MULTI_HPU", "MULTI_NEURON")
WRAPPINGS = {"fsdp": "FSDP (weights sharded across the processes)", "deepspeed": "DeepSpeed",
             "ddp": "DDP (every process holds the whole model)", "none": "no wrapper (one process, the whole model)"}


def uses_flash_attention(attn_implementation: str | None) -> bool:
    return bool(attn_implementation) and "flash" in attn_implementation


def check_attention_precision(attn_implementation: str | None, precision: Precision) -> None:
    """flash-attention kernels read fp16 or bf16 only, and prmkit keeps fp32 weights: its forwards work under the
    bf16/fp16 autocast of a GPU run, and a run in fp32 would fail at its first forward."""
    if uses_flash_attention(attn_implementation) and not (precision.bf16 or precision.fp16):
        raise PRMError(f"model.attn_implementation={attn_implementation} computes in bf16 or fp16 only, and this "
                       f"run computes in fp32 on {precision.device}; set precision=auto (bf16/fp16 autocast on a "
                       "GPU), bf16 or fp16, or use model.attn_implementation=sdpa")


def forward_autocast(precision: Precision):
    """The engine's autocast, for the forwards prmkit runs itself before training (the probe's features, the
    packing check): they see the numerics training will see, and flash-attention, which refuses fp32 inputs,
    runs in them too."""
    if precision.bf16 or precision.fp16:
        return torch.autocast(precision.device, dtype=torch.bfloat16 if precision.bf16 else torch.float16)
    return contextlib.nullcontext()


def deepspeed_settings(deepspeed: str | dict) -> dict:
    if isinstance(deepspeed, dict):
        return deepspeed
    try:
        return json.loads(Path(deepspeed).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PRMError(f"distributed.deepspeed={deepspeed}: not a readable DeepSpeed JSON file ({err}); give the "
                       "path of a JSON file or the settings inline") from None


def check_deepspeed_saves_weights(config: Config) -> None:
    """ZeRO-3 shards every weight across the processes. A full fine-tune is saved as weights that load only when
    DeepSpeed gathers them at save time (`stage3_gather_16bit_weights_on_model_save`); without it transformers
    writes DeepSpeed's own shards, which only DeepSpeed's zero_to_fp32.py reads, and no weights file. LoRA adapters
    are gathered by transformers itself, whatever the setting."""
    if not config.distributed.deepspeed or config.model.finetune != "full":
        return
    zero = deepspeed_settings(config.distributed.deepspeed).get("zero_optimization") or {}
    if str(zero.get("stage")) != "3":
        return
    key = "stage3_gather_16bit_weights_on_model_save"
    gather = zero.get(key, zero.get("stage3_gather_fp16_weights_on_model_save", False))
    if gather == "auto":  # accelerate fills it from its launcher's setting
        gather = os.environ.get("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "false")
    if str(gather).lower() != "true":
        raise PRMError(f"distributed.deepspeed: ZeRO stage 3 with zero_optimization.{key}={gather!r} saves a full "
                       "fine-tune as DeepSpeed shards, not as weights a scorer can load; set zero_optimization."
                       f"{key}: true in the DeepSpeed settings (or use model.finetune=lora, or ZeRO stage 2)")


def check_weights_saved(folder: Path) -> None:
    """After the engine saved a model into `folder`, before prmkit.json goes beside it: refuse to mark as scorable a
    folder whose weights would not load."""
    if any((folder / name).is_file() for name in WEIGHT_FILES):
        return
    found = ", ".join(sorted(p.name for p in folder.iterdir())) if folder.is_dir() else ""
    raise PRMError(f"the engine saved no model weights into {folder} (it holds: {found or 'nothing'}), so no scorer "
                   "could load it. DeepSpeed ZeRO-3 writes weights only with zero_optimization."
                   "stage3_gather_16bit_weights_on_model_save: true, FSDP only with distributed.fsdp_config."
                   "state_dict_type: FULL_STATE_DICT; set those and train again")


def wrapping(model) -> str:
    """How the engine wrapped the model: fsdp, deepspeed, ddp or none."""
    if torch.distributed.is_available():
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

        if isinstance(model, (FSDPModule, FullyShardedDataParallel)):
            return "fsdp"
    # by name (deepspeed is not installed everywhere), subclasses such as its PipelineEngine included
    if any(cls.__name__ == "DeepSpeedEngine" for cls in type(model).__mro__):
        return "deepspeed"
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return "ddp"
    return "none"


def check_wrapping(d: DistributedConfig, distributed_type: str, wrapped=None) -> None:
    """Refuse a run whose model is not wrapped as `distributed.*` (d) asks. Before training (`wrapped` None) the
    launch's distributed type alone tells that accelerate will not shard with FSDP; once the engine has wrapped the
    model, the wrapper itself is checked."""
    asked = "deepspeed" if d.deepspeed else "fsdp" if d.fsdp else None
    if asked is None:
        return
    if wrapped is None:
        if asked != "fsdp" or distributed_type in FSDP_DISTRIBUTED_TYPES:
            return
        got = "ddp" if distributed_type.startswith("MULTI_") else "none"
    else:
        got = wrapping(wrapped)
        if got == asked:
            return
    setting = f"distributed.fsdp={d.fsdp!r}" if asked == "fsdp" else "distributed.deepspeed"
    reason = ""
    if asked == "fsdp" and distributed_type not in FSDP_DISTRIBUTED_TYPES:
        reason = ("; accelerate shards with FSDP only across GPUs or other accelerators, never across CPU processes "
                  "or in a single process")
    fix = "remove distributed.fsdp to train with DDP" if asked == "fsdp" else "remove distributed.deepspeed"
    raise PRMError(f"{setting} asks for {WRAPPINGS[asked]}, but the engine gives this launch ({distributed_type}) "
                   f"{WRAPPINGS[got]}{reason}. Launch it on several GPUs (torchrun --nproc_per_node N), or {fix}")
