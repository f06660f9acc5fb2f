"""Checks of the training engine: settings it would accept without doing what they say are refused with the reason.

FSDP and DeepSpeed do not run on this CPU-only machine; what is tested here is the decision from the settings, the
launch type and the wrapper, and (tests/e2e/test_distributed.py) a CPU launch asked for FSDP."""

import json

import pytest
import torch

from prmkit.config import DistributedConfig, load_config
from prmkit.device import Precision
from prmkit.errors import PRMError
from prmkit.training.engine import (
    check_attention_precision,
    check_deepspeed_saves_weights,
    check_weights_saved,
    check_wrapping,
    forward_autocast,
    wrapping,
)

GPU_BF16 = Precision("cuda", bf16=True, fp16=False)
CPU_FP32 = Precision("cpu", bf16=False, fp16=False)
ZERO3 = {"zero_optimization": {"stage": 3}}


def test_flash_attention_without_half_precision_is_refused():
    check_attention_precision("flash_attention_2", GPU_BF16)
    check_attention_precision("sdpa", CPU_FP32)
    check_attention_precision(None, CPU_FP32)
    with pytest.raises(PRMError, match="flash_attention_2 computes in bf16 or fp16 only, and this run computes in "
                                       "fp32 on cuda; set precision=auto"):
        check_attention_precision("flash_attention_2", Precision("cuda", bf16=False, fp16=False))
    with pytest.raises(PRMError, match="fp32 on cpu"):
        check_attention_precision("kernels-community/flash-attn3", CPU_FP32)


def test_forwards_outside_the_engine_take_the_runs_autocast():
    layer = torch.nn.Linear(4, 4)
    with forward_autocast(Precision("cpu", bf16=True, fp16=False)):
        assert layer(torch.ones(1, 4)).dtype == torch.bfloat16
    with forward_autocast(CPU_FP32):
        assert layer(torch.ones(1, 4)).dtype == torch.float32


def config_with(*overrides):
    return load_config(None, list(overrides))


def test_zero3_full_fine_tune_without_gathered_weights_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", raising=False)
    settings = tmp_path / "ds.json"
    settings.write_text(json.dumps(ZERO3))
    with pytest.raises(PRMError, match="stage3_gather_16bit_weights_on_model_save=False saves a full fine-tune as "
                                       "DeepSpeed shards"):
        check_deepspeed_saves_weights(config_with("model.finetune=full", f"distributed.deepspeed={settings}"))
    full = config_with("model.finetune=full")
    full.distributed.deepspeed = {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}
    check_deepspeed_saves_weights(full)
    full.distributed.deepspeed = {"zero_optimization": {"stage": 3,
                                                        "stage3_gather_16bit_weights_on_model_save": "auto"}}
    with pytest.raises(PRMError, match="'false'"):  # accelerate fills "auto" from its launcher, off by default
        check_deepspeed_saves_weights(full)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "true")
    check_deepspeed_saves_weights(full)
    full.distributed.deepspeed = {"zero_optimization": {"stage": 2}}
    check_deepspeed_saves_weights(full)
    check_deepspeed_saves_weights(config_with(f"distributed.deepspeed={settings}"))  # LoRA is gathered anyway
    with pytest.raises(PRMError, match="not a readable DeepSpeed JSON file"):
        check_deepspeed_saves_weights(config_with("model.finetune=full", f"distributed.deepspeed={tmp_path / 'x'}"))


def test_a_folder_without_loadable_weights_is_not_marked_scorable(tmp_path):
    (tmp_path / "global_step4").mkdir()  # what DeepSpeed ZeRO-3 leaves without gathered weights
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(PRMError, match=r"saved no model weights .* \(it holds: config.json, global_step4\)"):
        check_weights_saved(tmp_path)
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    check_weights_saved(tmp_path)


def test_fsdp_is_refused_where_accelerate_would_not_shard():
    fsdp = DistributedConfig(fsdp="full_shard auto_wrap")
    check_wrapping(fsdp, "MULTI_GPU")  # accelerate shards there; the wrapper is checked once it exists
    with pytest.raises(PRMError, match="distributed.fsdp='full_shard auto_wrap' asks for FSDP .* but the engine gives "
                                       r"this launch \(MULTI_CPU\) DDP .* never across CPU processes"):
        check_wrapping(fsdp, "MULTI_CPU")
    with pytest.raises(PRMError, match=r"\(NO\) no wrapper"):
        check_wrapping(fsdp, "NO")
    check_wrapping(DistributedConfig(), "MULTI_CPU")  # nothing asked: DDP is what was asked


class DeepSpeedEngine(torch.nn.Module):
    """Stands in for deepspeed's engine class, which is recognised by name: deepspeed is not installed here."""


class PipelineEngine(DeepSpeedEngine):
    pass


def test_wrappers_are_told_apart_without_importing_deepspeed():
    assert wrapping(DeepSpeedEngine()) == wrapping(PipelineEngine()) == "deepspeed"
    assert wrapping(torch.nn.Linear(2, 2)) == "none"
    check_wrapping(DistributedConfig(deepspeed={"zero_optimization": {"stage": 2}}), "DEEPSPEED",
                   wrapped=PipelineEngine())


def test_a_model_the_engine_left_unwrapped_is_refused():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(PRMError, match=r"distributed.deepspeed asks for DeepSpeed, but the engine gives this launch "
                                       r"\(DEEPSPEED\) no wrapper"):
        check_wrapping(DistributedConfig(deepspeed={"zero_optimization": {"stage": 2}}), "DEEPSPEED", wrapped=model)
    with pytest.raises(PRMError, match=r"asks for FSDP .* \(MULTI_GPU\) no wrapper"):
        check_wrapping(DistributedConfig(fsdp="full_shard"), "MULTI_GPU", wrapped=model)
    check_wrapping(DistributedConfig(), "NO", wrapped=model)


def test_head_lr_with_no_head_weight_among_the_optimizers_parameters_is_refused(tiny_llama, tmp_path):
    from transformers import TrainingArguments

    from prmkit.model import load_token_classifier
    from prmkit.training.trainer import PRMTrainer

    def optimizer_for(model):
        args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
        return PRMTrainer(model=model, args=args, metadata=None, head_lr=1e-3).create_optimizer()

    model = load_token_classifier(str(tiny_llama))
    head = {id(p) for p in model.score.parameters()}
    groups = optimizer_for(model).param_groups
    assert {g["lr"] for g in groups if head & {id(p) for p in g["params"]}} == {1e-3}
    model.score.requires_grad_(False)  # the optimizer never sees the head, as when an engine flattened it away
    with pytest.raises(PRMError, match="training.head_lr=0.001: no weight of the head 'score' is among the "
                                       "optimizer's parameters"):
        optimizer_for(model)
