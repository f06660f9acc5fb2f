"""Where a model runs and in which precision, for every command (train, score, eval).

Training keeps every weight (the head included) in fp32: on a GPU the forward runs under bf16/fp16 autocast while
AdamW updates fp32 master weights, because bf16 weights round small updates away. Inference has no optimizer
state, so it loads the weights in bf16/fp16 on a GPU and fp32 on CPU, where half-precision matmuls are slow."""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass

import torch

from prmkit.errors import PRMError

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}


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


def resolve_device(device: str | torch.device | None) -> torch.device:
    """cuda > mps > cpu when not given; a named device that is not there is an error, not a silent fallback."""
    chosen = torch.device(device or available_device())
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise PRMError(f"device={device!r} but no CUDA GPU is visible; use device='cpu' or leave it unset")
    if chosen.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise PRMError(f"device={device!r} but MPS is not available; use device='cpu' or leave it unset")
    return chosen


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Inference weights: bf16 on a GPU that supports it (fp16 otherwise), fp32 on CPU, where half-precision
    matmuls are many times slower. No optimizer state here, so low-precision weights lose nothing."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.type == "cpu":
            return torch.float32
        return torch.bfloat16 if bf16_supported(device.type) else torch.float16
    if dtype not in DTYPES:
        raise PRMError(f"dtype={dtype!r} is not known; use auto, fp32, bf16 or fp16")
    return DTYPES[dtype]


def check_compilable(device: str, key: str) -> None:
    """torch.compile's inductor backend writes C++ kernels on a CPU and Triton kernels on a GPU, and builds them
    on the first forward pass; refuse at the start, with the fix, rather than minutes in with a compiler trace.
    `key` is the user's name for the setting (training.torch_compile, --compile)."""
    if device == "cpu":
        from torch._inductor import cpp_builder

        try:
            cpp_builder.get_cpp_compiler()
        except Exception as err:  # noqa: BLE001 - inductor raises its own error types, all meaning "no compiler"
            raise PRMError(f"{key} on CPU needs a C++ compiler (inductor builds C++ kernels), and none was found "
                           f"({type(err).__name__}); install one (e.g. apt install g++) or turn {key} off") from None
    elif device == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            raise PRMError(f"{key} on a GPU needs Triton (inductor builds Triton kernels), which is not installed; "
                           f"pip install triton, or turn {key} off")


# Entered only while compiling: dynamo's frame conversion (tracing) and inductor's graph compilation (the backward
# graph is compiled lazily, at the first backward pass). Compiled code that runs (and, say, runs out of memory)
# passes through neither.
COMPILING_FILES = (os.path.join("torch", "_dynamo", "convert_frame.py"),
                   os.path.join("torch", "_inductor", "compile_fx.py"))


def raised_while_compiling(err: BaseException) -> bool:
    """Whether an error came from torch.compile compiling: one of dynamo's own error types (a failed backend,
    an unsupported construct), whose tracebacks dynamo shortens, or a plain Python error (an AssertionError)
    raised from inside the compiler."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(err, TorchDynamoException) or \
        any(f.filename.endswith(COMPILING_FILES) for f in traceback.extract_tb(err.__traceback__))


def compile_failure(err: BaseException) -> str:
    """The error torch.compile's own wrapper (BackendCompilerFailed, ...) holds, as 'Type: first line'."""
    while getattr(err, "inner_exception", None) is not None or err.__cause__ is not None:
        err = getattr(err, "inner_exception", None) or err.__cause__
    lines = str(err).splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


@dataclass(frozen=True)
class Launch:
    """This process's place in a multi-process launch (torchrun, `accelerate launch`, DeepSpeed's launcher). The one
    definition of the main process, for training and scoring alike: global rank 0, or a lone process."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def launch_from_env() -> Launch:
    """This process's place in the launch; one process when no launcher set the variables."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Launch()
    return Launch(rank=int(os.environ.get("RANK", "0")), world_size=world_size,
                  local_rank=int(os.environ.get("LOCAL_RANK", "0")))
