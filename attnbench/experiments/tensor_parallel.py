"""A decode point timed tensor-parallel: every rank of a torchrun job holds its slice of
the layer (modules.tensor_parallel) and its KV heads' cache, all ranks run the same calls
in lockstep, and each call ends with the all-reduce of the layer's output.

What differs from one process, and lives here: which points can run (the providers built
on the layer's own calls, no CUDA graph), the rank's share of the point (its heads), the
reference the summed output is checked against (the ranks' partial references, summed),
statuses every rank agrees on (so no rank waits in a collective for one that skipped the
point), lockstep sampling, and the all-reduce timed alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from ..measure.lockstep import lockstep_sample
from ..measure.stats import Measurement
from ..measure.timing import Sampling, Timer
from ..model.capacity import kv_heads_per_rank
from ..modules.attention import GroupedQueryAttention
from ..modules.providers import PROVIDERS, reference_step
from ..modules.tensor_parallel import all_reduce_call, shard_layer
from ..modules.workload import DecodeInputs

#: Providers whose calls are the layer's own, so that o_proj's all-reduce is in them.
TP_PROVIDERS = tuple(name for name, p in PROVIDERS.items() if p.splits_heads)


@dataclass(frozen=True)
class Ranks:
    """This process's place in the tensor-parallel group the point runs on."""

    rank: int
    size: int
    device: torch.device
    group: dist.ProcessGroup | None = None

    @classmethod
    def joined(cls, tp: int, device: torch.device) -> Ranks | None:
        """The group torch.distributed was initialised with (None when it was not),
        which must have `tp` ranks."""
        if not (dist.is_available() and dist.is_initialized()):
            return None
        size = dist.get_world_size()
        if size != tp:
            raise ValueError(f"a point of tp {tp} on a process group of {size} ranks")
        return cls(dist.get_rank(), size, device)

    def unsupported(self, point: Any) -> str | None:
        """Why the point cannot run tensor-parallel, or None."""
        if point.provider not in TP_PROVIDERS:
            return f"tensor parallelism is timed for the {' and '.join(TP_PROVIDERS)} providers"
        if point.cuda_graph:
            return "CUDA graphs are not captured under tensor parallelism"
        return None

    def local(self, point: Any) -> Any:
        """The rank's share of the point: its query heads and the KV heads they read."""
        shape = point.shape
        kv_here = kv_heads_per_rank(shape.num_heads, shape.num_kv_heads, self.size)
        return replace(
            point,
            num_heads=shape.num_heads // self.size,
            num_kv_heads=kv_here,
            head_dim=shape.head_dim,
            tp=1,
        )

    def shard(self, layer: GroupedQueryAttention) -> GroupedQueryAttention:
        """This rank's slice of `layer`, summing its outputs over the group."""
        return shard_layer(layer, self.size, self.rank, all_reduce=True, group=self.group)

    def agree(self, status: str | None) -> str | None:
        """The first rank's status that is not None (naming the rank when it is not 0),
        the same on every rank: a point one rank cannot run is run by none."""
        statuses: list[str | None] = [None] * self.size
        dist.all_gather_object(statuses, status, group=self.group)
        for rank, found in enumerate(statuses):
            if found is not None:
                return found if rank == 0 else f"{found} (rank {rank})"
        return None

    def reference(self, inputs: DecodeInputs) -> torch.Tensor:
        """The whole layer's reference step: every rank's partial reference, summed."""
        partial = reference_step(inputs).contiguous()
        dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=self.group)
        return partial

    def sampler(self) -> Callable[..., Measurement]:
        """Timer.sample's replacement: every rank takes the same samples, and each sample
        is the slowest rank's (measure.lockstep)."""

        def sample(timer: Timer, call, sampling: Sampling, setup=None) -> Measurement:
            return lockstep_sample(timer, call, sampling, setup, self.group)

        return sample

    def time_all_reduce(self, point: Any, dtype: torch.dtype, sampling: Sampling) -> Measurement:
        """The step's all-reduce alone (the layer's output of one token per sequence),
        timed as the step is."""
        out = torch.zeros(point.batch, 1, point.d_model, dtype=dtype, device=self.device)
        return lockstep_sample(
            Timer(self.device), all_reduce_call(out, self.group), sampling, group=self.group
        )
