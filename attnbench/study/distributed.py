"""Running under torchrun: which rank this process is, its device, and the process group
the ranks meet in (NCCL on GPUs, gloo on CPUs), from the variables torchrun sets."""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

#: How long a rank waits for the others at the end of a study (the slowest share).
BARRIER_TIMEOUT = datetime.timedelta(hours=24)


@dataclass(frozen=True)
class Launch:
    """This process's place in a torchrun job."""

    rank: int
    world_size: int
    local_rank: int

    def device(self, device: torch.device) -> torch.device:
        """The device this rank measures on: its own GPU (cuda:LOCAL_RANK) when the study
        runs on CUDA, else `device`."""
        return torch.device("cuda", self.local_rank) if device.type == "cuda" else device


def torchrun_launch(min_ranks: int = 2) -> Launch | None:
    """This process's rank when torchrun started at least `min_ranks` processes, else
    None (also outside torchrun)."""
    try:
        world_size = int(os.environ.get("WORLD_SIZE", "0"))
        if world_size < min_ranks or "RANK" not in os.environ:
            return None
        return Launch(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", 0)))
    except (KeyError, ValueError):
        return None


@contextmanager
def process_group(device: torch.device) -> Iterator[None]:
    """The ranks' process group for the block (joined from torchrun's environment, left
    after), unless one is already there."""
    if dist.is_initialized():
        yield
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    options = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, timeout=BARRIER_TIMEOUT, **options)
    try:
        yield
    finally:
        dist.destroy_process_group()


def wait_for_all() -> None:
    """Block until every rank of the group gets here."""
    dist.barrier()
