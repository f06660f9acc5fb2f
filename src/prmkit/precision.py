"""Pick device and numeric precision. Weights (the head included) always stay fp32: on GPU the forward runs under
bf16/fp16 autocast while AdamW updates fp32 master weights, because bf16 weights round small updates away."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from prmkit.errors import PRMError


@dataclass(frozen=True)
class Precision:
    device: str  # cpu | cuda | mps
    bf16: bool
    fp16: bool

    @property
    def label(self) -> str:
        mode = "bf16 autocast" if self.bf16 else "fp16 autocast" if self.fp16 else "fp32"
        return f"{mode} on {self.device}, fp32 weights"


def available_device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def bf16_supported(device: str) -> bool:
    if device == "cuda":
        return torch.cuda.is_bf16_supported()
    if device == "mps":
        try:
            torch.ones(1, dtype=torch.bfloat16, device="mps")
            return True
        except (RuntimeError, TypeError):
            return False
    return True


def resolve_precision(name: str, device: str | None = None) -> Precision:
    device = device or available_device()
    if name == "auto":
        if device == "cpu":
            return Precision(device, bf16=False, fp16=False)  # bf16 matmuls are far slower than fp32 on most CPUs
        if bf16_supported(device):
            return Precision(device, bf16=True, fp16=False)
        return Precision(device, bf16=False, fp16=device == "cuda")
    if name == "fp32":
        return Precision(device, bf16=False, fp16=False)
    if name == "fp16" and device != "cuda":
        raise PRMError(f"precision=fp16 needs a CUDA GPU (this machine: {device}); use precision=auto or fp32")
    if name == "bf16":
        if not bf16_supported(device):
            raise PRMError(f"precision=bf16 is not supported on this {device}; use precision=auto")
        if device == "cpu":
            print("prmkit: warning: precision=bf16 on CPU is usually much slower than fp32", file=sys.stderr)
    return Precision(device, bf16=name == "bf16", fp16=name == "fp16")
