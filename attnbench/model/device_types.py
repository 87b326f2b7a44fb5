"""What attnbench knows of a GPU: its vendor's figures, and what published microbenchmarks
measured of it (model/device_table.py holds the devices, model/devices.py looks them up).

The roofline uses the measured figures, never the datasheet's alone: a streaming kernel
reaches 77-93% of the datasheet bandwidth and a large GEMM 51-87% of the dense peak on the
devices measured. None of them is fitted to an end-to-end inference figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The names of the FLOP/s figures, as attnbench spells dtypes; "tfloat32" is float32
#: matmuls on tensor cores (TF32, which torch leaves off by default) and "float8" both
#: float8 formats (e4m3 and e5m2 share one peak); "float4" is the 4-bit floats' peak of
#: Blackwell's tensor cores (nvfp4 weights times nvfp4 activations).
PEAK_DTYPES: tuple[str, ...] = (
    "float32",
    "tfloat32",
    "bfloat16",
    "float16",
    "float8",
    "int8",
    "float4",
)

_T = 1e12  # tera
_G = 1e9  # giga
#: How figures() names a device's load latency from memory (notes read it to say the
#: kernels' first loads are timed).
LOAD_LATENCY = "load latency"


@dataclass(frozen=True)
class Figure:
    """A value a published microbenchmark measured (or an instruction set defines: the
    tensor cores' tile), and where it is published."""

    value: float
    source: str


@dataclass(frozen=True)
class Protocol:
    """One of a collective library's protocols, as its cost model times it: a base latency,
    a latency per ring step, and a share of the bus bandwidth (NCCL's model gives its
    low-latency LL a quarter of it for an all-reduce, LL128 0.92, Simple all of it), at
    most `max_bandwidth` (bytes/s; None: no cap)."""

    name: str
    base_s: float
    step_s: float
    share: float
    max_bandwidth: float | None = None

    def time_s(self, bytes_on_bus: float, steps: int, bus_bandwidth: float) -> float:
        """The time of a collective that moves `bytes_on_bus` (the bytes over the bus
        bandwidth's busbw, as nccl-tests counts them) in `steps` ring steps."""
        bandwidth = self.share * bus_bandwidth
        if self.max_bandwidth is not None:
            bandwidth = min(bandwidth, self.max_bandwidth)
        return self.base_s + steps * self.step_s + bytes_on_bus / bandwidth


@dataclass(frozen=True)
class Collectives:
    """A collective among a node's GPUs: a fixed latency, a latency per step of the ring
    (an all-reduce over n ranks takes 2*(n-1) steps, an all-gather n-1), and the bus
    bandwidth of large messages as nccl-tests measures it (busbw: algbw * 2*(n-1)/n, the
    same figure whatever n). A `step_s` of 0 is a measured small-message time that does
    not grow with n. Where the library's cost model has `protocols`, a collective takes
    the fastest of them, as the library picks it (the latency is then its low-latency
    protocol's, the first)."""

    latency_s: float
    bus_bandwidth: float
    source: str
    step_s: float = 0.0
    protocols: tuple[Protocol, ...] = ()
    #: The most ranks a collective joins: one node's GPUs, the 8 of the nodes every
    #: figure was measured on. Past them a collective crosses the network between nodes.
    node_gpus: int = 8

    def latency(self, steps: int) -> float:
        """The latency of a collective of `steps` ring steps."""
        return self.latency_s + steps * self.step_s

    def time_s(self, bytes_on_bus: float, steps: int) -> float:
        """The time of a collective that moves `bytes_on_bus` in `steps` ring steps: the
        fastest protocol's, or the latency plus the bytes at the bus bandwidth."""
        if not self.protocols:
            return self.latency(steps) + bytes_on_bus / self.bus_bandwidth
        return min(p.time_s(bytes_on_bus, steps, self.bus_bandwidth) for p in self.protocols)

    def describe(self) -> str:
        """The latency and bandwidth in words, with their source."""
        bandwidth = f"{self.bus_bandwidth / _G:,.0f} GB/s bus bandwidth"
        if self.protocols:
            named = ", ".join(
                f"{p.name} {p.base_s * 1e6:.3g} us + {p.step_s * 1e6:.2g} us a step + bytes at "
                f"{p.share:.3g}x{_capped(p)}"
                for p in self.protocols
            )
            return f"all-reduce: the fastest of {named} the {bandwidth} ({self.source})"
        steps = f" + {self.step_s * 1e6:.3g} us a ring step" if self.step_s else ""
        latency = f"{self.latency_s * 1e6:.3g} us{steps}"
        return f"all-reduce {latency} + bytes at {bandwidth} ({self.source})"


def _capped(protocol: Protocol) -> str:
    cap = protocol.max_bandwidth
    return "" if cap is None else f" (at most {cap / _G:.3g} GB/s)"


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU model: its vendor's figures, and what published microbenchmarks measured of
    it, which are what the roofline uses. Units: bytes, bytes/s, FLOP/s, seconds."""

    name: str
    title: str
    #: The vendor's stated capacity, decimal GB (80GB = 80 * 10**9 bytes).
    memory_bytes: int
    #: Memory bandwidth a streaming kernel reaches, measured (bandwidth_source).
    memory_bandwidth: float
    #: Dense matmul FLOP/s a large GEMM reaches, by the names of PEAK_DTYPES (flops_source).
    dense_flops: Mapping[str, float]
    #: All-reduce among the GPUs of a node, measured; None: the device has no peers here.
    collectives: Collectives | None
    #: The cost of one kernel launch, in a captured CUDA (or HIP) graph as serving engines
    #: run their decode steps (launch_source).
    launch_s: float
    #: What carries the collectives: "NVLink 4", "PCIe Gen4 x16", "Infinity Fabric".
    interconnect: str
    #: The vendor's figures: peak memory bandwidth, dense peak FLOP/s by dtype, and the
    #: interconnect's bytes/s per GPU and per direction.
    datasheet_bandwidth: float
    datasheet_flops: Mapping[str, float]
    interconnect_bandwidth: float | None
    #: The vendor's datasheets and whitepapers.
    sources: tuple[str, ...]
    bandwidth_source: str = ""
    flops_source: str = ""
    launch_source: str = ""
    #: The rows (M, the tokens) of the smallest tile its tensor (matrix) cores multiply at
    #: their full rate: a matmul over fewer tokens, or a count that is not a multiple of
    #: it, computes the last tile whole, its missing rows as zeros (mma_source). 1: no
    #: tile (a CPU, or a machine whose matmul rate was measured as it ran).
    mma_rows: int = 1
    mma_source: str = ""
    #: The fewest rows (tokens) of the tile a serving engine's grouped expert GEMM (a
    #: mixture of experts' fused MoE kernel) gives one expert, where it is under
    #: mma_rows: the kernel tiles each expert's tokens to the next power of two from it
    #: up to mma_rows (expert_source); 0: mma_rows, as any matmul.
    expert_rows: int = 0
    expert_source: str = ""
    #: The FLOP/s a 16-bit causal attention kernel's forward pass reaches (QK^T, softmax,
    #: PV: a FlashAttention-style prefill), measured, which the attention core runs at
    #: (attention_source); 0: not measured on the device or its chip, the matmul rate.
    attention_flops: float = 0.0
    attention_source: str = ""
    #: The share of the matmul rate a kernel on the warp-level mma.sync reaches (Marlin's
    #: weight-only kernels: Matmul.tile), where the device's full-rate instruction is
    #: another (Hopper's wgmma), measured (warp_mma_source); 1: mma.sync is the full-rate
    #: instruction (Ampere, Ada), or its rate was not measured on the chip.
    warp_mma_share: float = 1.0
    warp_mma_source: str = ""
    #: The latency of one load from the device's memory, past its last cache: a pointer
    #: chase's, measured (memory_latency_source). Each kernel waits it for its first bytes,
    #: which then stream at memory_bandwidth (the latency-bandwidth model of a transfer);
    #: 0: not counted (this machine, whose overhead per layer holds it).
    memory_latency_s: float = 0.0
    memory_latency_source: str = ""

    @property
    def most_tp(self) -> int:
        """The most tensor-parallel ranks whose collectives this device's figures time: one
        node's GPUs (Collectives.node_gpus), 1 without an interconnect."""
        return self.collectives.node_gpus if self.collectives is not None else 1

    def __post_init__(self) -> None:
        if not 0 < self.warp_mma_share <= 1:
            raise ValueError(f"warp_mma_share must be in (0, 1], got {self.warp_mma_share}")
        if self.memory_latency_s < 0:
            raise ValueError(f"memory_latency_s must be >= 0, got {self.memory_latency_s}")

    def figures(self) -> str:
        """The figures that set a prediction, each with its source, in one paragraph."""
        flops = ", ".join(f"{d} {_tflops(v)}" for d, v in self.dense_flops.items())
        parts = [
            f"memory {self.memory_bandwidth / _G:,.0f} GB/s ({self.bandwidth_source})",
            f"matmul TFLOPS {flops} ({self.flops_source})",
            f"launch {self.launch_s * 1e6:.3g} us per kernel ({self.launch_source})",
        ]
        if self.memory_latency_s:
            parts.append(
                f"{LOAD_LATENCY} {self.memory_latency_s * 1e9:,.0f} ns from memory, a kernel's "
                f"wait for its first bytes ({self.memory_latency_source})"
            )
        if self.mma_rows > 1:
            parts.append(
                f"matmul tokens padded to multiples of {self.mma_rows} ({self.mma_source})"
            )
        if self.attention_flops:
            parts.append(
                f"attention TFLOPS {_tflops(self.attention_flops)} in 16 bits, at most the "
                f"matmul's ({self.attention_source})"
            )
        if self.warp_mma_share < 1:
            parts.append(
                f"a weight-only kernel on the warp-level mma.sync (Marlin's) at "
                f"{self.warp_mma_share:.2f} of the matmul rate ({self.warp_mma_source})"
            )
        if self.expert_rows:
            parts.append(
                f"a fused MoE kernel's tokens of an expert padded to the next power of two "
                f"from {self.expert_rows} up to {self.mma_rows} ({self.expert_source})"
            )
        if self.collectives is not None:
            parts.append(self.collectives.describe())
        return "; ".join(parts)


def _tflops(flops: float) -> str:
    """TFLOP/s to the unit from 10 (1,403), to three figures below it (a CPU's 0.279)."""
    tera = flops / _T
    return f"{tera:,.0f}" if tera >= 10 else f"{tera:.3g}"
