"""Set-up and tear-down of a torch.distributed process group, in one place for every data-parallel path (the
official protocol's real 2-process run, the deep nets under ``torchrun``, and their tests).

``destroy_process_group`` is collective: a rank that tears its group down while another still communicates with
it can abort that rank (SIGABRT, "terminate called without an active exception", seen once in CI with gloo and
torch 2.13). On the normal path every rank therefore meets at a barrier first; on an error the group is destroyed
at once, since the other ranks may never reach the barrier.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist


def finish_distributed() -> None:
    """Tear down this process's group, if any, after a barrier (every rank calls it)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


@contextmanager
def process_group(backend: str, init_method: str, rank: int, world_size: int) -> Iterator[None]:
    """A process group for the body: :func:`finish_distributed` when it returns, an immediate destroy when it
    raises."""
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
    try:
        yield
    except BaseException:
        dist.destroy_process_group()
        raise
    finish_distributed()


def world() -> tuple[int, int]:
    """(rank, world size) of the current process group, (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_distributed(device: str) -> str:
    """Initialise torch.distributed when launched by torchrun (``WORLD_SIZE > 1``); returns the device to use
    (``cuda:LOCAL_RANK`` for a CUDA run)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    if device.startswith("cuda"):
        torch.cuda.set_device(local_rank)
        return f"cuda:{local_rank}"
    return device
