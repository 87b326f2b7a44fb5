"""The gate's rules (its thresholds, what identifies a machine), apart from the gate
(gate.compare), so that the command line and the history read them without loading what
the gate judges with (numpy, the record types)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    """The gate's knobs; the CLI sets `time`, `mem` and `count`, the rest are fixed rules.
    `count` is the relative change of a count (instructions) beyond which it regresses or
    improves."""

    time: float = 0.10
    mem: float = 0.01
    count: float = 0.01
    mem_floor_bytes: int = 1 << 20
    time_floor_ms: float = 0.005
    noise_factor: float = 3.0
    confidence: float = 0.99
    resamples: int = 2000
    seed: int = 2000


#: Environment fields that name the machine (its identity): they must match for timings,
#: in-run ratios and counts to gate; cpu_model only for CPU runs.
GATING_ENV_FIELDS = ("device_name", "torch_version", "cuda_version", "num_threads")
#: Environment fields that a run measured of its machine: the copy bandwidth (GB/s) and
#: the matmul throughput ({dtype: TFLOPS}). They move with the machine's load.
PEAK_FIELDS = ("peak_gbps", "peak_tflops")
