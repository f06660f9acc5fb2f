"""The few collective operations that scoring needs when launched by torchrun (or `accelerate launch`).

Training leaves all of this to the Trainer; `prmkit score` is plain PyTorch, so it reads the launcher's
environment (RANK, WORLD_SIZE, LOCAL_RANK) itself and joins the process group only when there is more than one
process, so a single-process run never touches torch.distributed.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from prmkit.device import Launch
from prmkit.errors import PRMError


def rank_device(requested: str | None, launch: Launch, cuda_available: bool) -> str | None:
    """The device this process scores on. Under a multi-process launch with GPUs each process takes the GPU of its
    LOCAL_RANK, whether the device was left unset or given as a bare "cuda": "cuda" alone means the current GPU,
    which is GPU 0 in every process, so all of them would share one GPU and leave the others idle. One process, or
    another device type, keeps what was asked (None: the usual choice)."""
    if not launch.distributed:
        return requested
    if requested is None:
        return f"cuda:{launch.local_rank}" if cuda_available else None
    kind, _, index = requested.partition(":")
    if kind != "cuda":
        return requested
    if index:
        raise PRMError(f"device={requested!r} puts all {launch.world_size} processes of this launch on one GPU; "
                       f"give --device cuda and each process takes the GPU of its LOCAL_RANK (set "
                       f"CUDA_VISIBLE_DEVICES to choose which GPUs)")
    return f"cuda:{launch.local_rank}"


def join_process_group(launch: Launch, device: torch.device) -> None:
    if launch.distributed and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)  # collectives on NCCL run on the current device
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def all_ranks_ok(launch: Launch, ok: bool) -> list[int]:
    """Ranks that failed, as every rank sees it; a barrier that also tells the others something went wrong,
    so no rank waits forever on a peer that stopped with an error."""
    return [rank for rank, rank_ok in enumerate(gather_from_ranks(launch, ok)) if not rank_ok]


def gather_from_ranks(launch: Launch, value) -> list:
    """Every rank's `value` (any picklable object), in rank order, on every rank."""
    if not launch.distributed:
        return [value]
    gathered = [None] * launch.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def leave_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
