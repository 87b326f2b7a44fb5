"""All-reduce latency and bus bandwidth over this node's GPUs, on the slowest rank, for
the figures the roofline takes for a GPU's interconnect (model/device_table.py: NCCL's
latency model, nccl-tests' bus bandwidth).

Run under torchrun, one rank a GPU (gloo on CPUs, to check the script):

    torchrun --standalone --nproc-per-node 8 scripts/allreduce_bench.py \\
        --json results/gpu/allreduce.json

For each message size, bfloat16 tensors of 4 KiB to 256 MiB: a block of all-reduces
launched one after another, and on CUDA the same block captured in a CUDA graph and
replayed, as a decode step replayed from a graph runs its all-reduces. A sample is the
mean time of its block's calls; each size's time is the median over samples, of the
slowest rank's. The algorithm bandwidth is the bytes over that time, the bus bandwidth
that times 2 (n - 1) / n (nccl-tests' convention for an all-reduce over n ranks). Rank 0
prints the table and writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from attnbench.experiments.decode import capture_graph
from attnbench.measure.environment import collect_environment
from attnbench.measure.lockstep import lockstep_sample
from attnbench.measure.stats import median
from attnbench.measure.timing import Sampling, Timer
from attnbench.modules.tensor_parallel import all_reduce_call
from attnbench.study.distributed import process_group, torchrun_launch

KIB = 1 << 10
SIZES = [KIB << k for k in range(2, 19, 2)]  # 4 KiB .. 256 MiB, by fours
CPU_SIZES = [4 * KIB, 64 * KIB, 1024 * KIB]
#: All-reduces in a timed block, and samples of each.
BLOCK, SAMPLES = 10, 15


def bus_factor(ranks: int) -> float:
    """nccl-tests' bus bandwidth over algorithm bandwidth for an all-reduce: 2 (n - 1) / n,
    the share of the data each rank sends and receives over its links."""
    return 2 * (ranks - 1) / ranks


def time_size(nbytes: int, device: torch.device, graph: bool) -> list[float]:
    """The slowest rank's samples (ms per all-reduce) of blocks of BLOCK all-reduces of
    `nbytes`, timed in lockstep (measure.lockstep)."""
    reduce = all_reduce_call(torch.zeros(nbytes // 2, dtype=torch.bfloat16, device=device))

    def block() -> None:
        for _ in range(BLOCK):
            reduce()

    call = capture_graph(block, None, device) if graph else block
    timed = lockstep_sample(Timer(device), call, Sampling(warmup=1, repeats=SAMPLES))
    return [ms / BLOCK for ms in timed.samples_ms]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="rank 0 writes the figures here")
    args = parser.parse_args(argv)
    launch = torchrun_launch()
    if launch is None:
        parser.error(f"needs two or more ranks: torchrun started {os.environ.get('WORLD_SIZE')}")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", launch.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    rows = []
    with process_group(device):
        n = launch.world_size
        for nbytes in SIZES if cuda else CPU_SIZES:
            for graph in (False, True) if cuda else (False,):
                samples = time_size(nbytes, device, graph)
                ms = median(samples)
                algbw = nbytes / (ms * 1e-3) / 1e9
                row = {
                    "bytes": nbytes,
                    "graph": graph,
                    "time_us": ms * 1e3,
                    "algbw_gbps": algbw,
                    "busbw_gbps": algbw * bus_factor(n),
                    "samples_ms": samples,
                }
                rows.append(row)
                if launch.rank == 0:
                    how = "graph" if graph else "eager"
                    print(
                        f"  {nbytes / KIB:8.0f} KiB {how}: {row['time_us']:9.1f} us, "
                        f"bus {row['busbw_gbps']:7.1f} GB/s"
                    )
        if launch.rank == 0 and args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            document = {"environment": collect_environment(device), "ranks": n, "rows": rows}
            args.json.write_text(json.dumps(document, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
