"""Named GPUs and their published peaks: memory, memory bandwidth, dense FLOP/s by dtype and
the bandwidth between GPUs, the inputs of a roofline model of latency on a named device.

Every figure is the vendor's, from the datasheet or whitepaper in the device's `sources`,
read by these conventions (docs/devices.md says the same for readers):

- FLOP/s are dense, without structured sparsity. Where the vendor publishes a dense figure
  (the A100, L40S and MI300X datasheets; NVIDIA's H100 architecture whitepaper) it is taken
  as published; where the datasheet gives only the figure with sparsity (L4), the dense one
  is half of it, as that datasheet's footnote says sparsity doubles it.
- Memory is the vendor's stated capacity in decimal units: "80GB" is 80 * 10**9 bytes. The
  memory a process can allocate is another figure (torch reports the device's own).
- Interconnect bandwidth is per GPU and per direction, the rate at which one GPU sends to
  its peers while it receives as much: a figure the vendor states for both directions
  together (NVLink 4: 900 GB/s) is halved (450e9). Cards without NVLink or Infinity Fabric
  give their PCIe slot's rate, per direction too (PCIe Gen4 x16: 64 GB/s both ways, 32e9).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..errors import FieldError, closest
from .dtypes import canonical_dtype

#: The names of the FLOP/s figures, as attnbench spells dtypes; "tfloat32" is float32
#: matmuls on tensor cores (TF32, which torch leaves off by default) and "float8" both
#: float8 formats (e4m3 and e5m2 share one peak).
PEAK_DTYPES: tuple[str, ...] = ("float32", "tfloat32", "bfloat16", "float16", "float8", "int8")
#: attnbench's dtypes whose peak goes by another name.
_PEAK_NAME = {"float8_e4m3fn": "float8", "float8_e5m2": "float8"}

#: The device name that stands for this machine: the peaks it measures, not a datasheet's.
THIS_DEVICE = "this"

_T = 1e12  # tera
_G = 1e9  # giga


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU model as its vendor publishes it; the units are bytes, bytes/s and FLOP/s."""

    name: str
    title: str
    #: The vendor's stated capacity, decimal GB (80GB = 80 * 10**9 bytes).
    memory_bytes: int
    #: Peak memory bandwidth, bytes/s.
    memory_bandwidth: float
    #: Dense (no sparsity) peak FLOP/s by the names of PEAK_DTYPES the vendor gives.
    dense_flops: Mapping[str, float]
    #: Bytes/s per GPU, one direction, to its peers for collectives: NVLink or Infinity
    #: Fabric where the card has it, else its PCIe slot (`interconnect` says which); None
    #: where no figure is known (every device of DEVICES has one).
    interconnect_bandwidth: float | None
    #: What carries the collectives: "NVLink 4", "PCIe Gen4 x16", "Infinity Fabric".
    interconnect: str
    #: The vendor's datasheets and whitepapers for every figure.
    sources: tuple[str, ...]


def _device(
    name: str,
    title: str,
    memory_gb: int,
    bandwidth_gbs: float,
    tflops: dict[str, float],
    interconnect: str,
    interconnect_gbs: float,
    *sources: str,
) -> DeviceSpec:
    """A spec from the vendor's units: GB, GB/s, TFLOPS and GB/s per direction."""
    return DeviceSpec(
        name=name,
        title=title,
        memory_bytes=memory_gb * 10**9,
        memory_bandwidth=bandwidth_gbs * _G,
        dense_flops=MappingProxyType({dtype: value * _T for dtype, value in tflops.items()}),
        interconnect_bandwidth=interconnect_gbs * _G,
        interconnect=interconnect,
        sources=sources,
    )


_H100_DATASHEET = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_HOPPER_WHITEPAPER = "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
_H200_DATASHEET = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_A100_DATASHEET = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_L40S_DATASHEET = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_L4_DATASHEET = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_MI300X_DATASHEET = (
    "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
    "amd-instinct-mi300x-data-sheet.pdf"
)

# Dense TFLOPS of the H100 SXM5 in the Hopper whitepaper (its datasheet rounds the figures
# with sparsity: 1,979 for bfloat16); the H200 is the same GH100 at the same clocks.
_H100_SXM_TFLOPS = {
    "float32": 66.9,
    "tfloat32": 494.7,
    "bfloat16": 989.4,
    "float16": 989.4,
    "float8": 1978.9,
    "int8": 1978.9,
}
# The A100 datasheet gives dense | sparse; A100 has no float8.
_A100_TFLOPS = {"float32": 19.5, "tfloat32": 156, "bfloat16": 312, "float16": 312, "int8": 624}

DEVICES: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        _device(
            "h100-sxm",
            "NVIDIA H100 SXM5 80GB",
            80,
            3350,
            _H100_SXM_TFLOPS,
            "NVLink 4",
            900 / 2,
            _H100_DATASHEET,
            _HOPPER_WHITEPAPER,
        ),
        # The PCIe card's NVLink bridge joins two cards only: collectives among more go
        # over its PCIe Gen5 x16 slot, 128 GB/s both ways.
        _device(
            "h100-pcie",
            "NVIDIA H100 PCIe 80GB",
            80,
            2000,
            {
                "float32": 51.2,
                "tfloat32": 378,
                "bfloat16": 756,
                "float16": 756,
                "float8": 1513,
                "int8": 1513,
            },
            "PCIe Gen5 x16",
            128 / 2,
            _H100_DATASHEET,
            _HOPPER_WHITEPAPER,
        ),
        _device(
            "h200",
            "NVIDIA H200 SXM 141GB",
            141,
            4800,
            _H100_SXM_TFLOPS,
            "NVLink 4",
            900 / 2,
            _H200_DATASHEET,
            _HOPPER_WHITEPAPER,
        ),
        _device(
            "a100-80gb",
            "NVIDIA A100 SXM4 80GB",
            80,
            2039,
            _A100_TFLOPS,
            "NVLink 3",
            600 / 2,
            _A100_DATASHEET,
        ),
        _device(
            "a100-40gb",
            "NVIDIA A100 SXM4 40GB",
            40,
            1555,
            _A100_TFLOPS,
            "NVLink 3",
            600 / 2,
            _A100_DATASHEET,
        ),
        # The L40S datasheet gives dense | sparse; it has no NVLink.
        _device(
            "l40s",
            "NVIDIA L40S 48GB",
            48,
            864,
            {
                "float32": 91.6,
                "tfloat32": 183,
                "bfloat16": 362.05,
                "float16": 362.05,
                "float8": 733,
                "int8": 733,
            },
            "PCIe Gen4 x16",
            64 / 2,
            _L40S_DATASHEET,
        ),
        # The L4 datasheet gives the tensor-core figures with sparsity only (TF32 120,
        # BF16 and FP16 242, FP8 and INT8 485): halved here.
        _device(
            "l4",
            "NVIDIA L4 24GB",
            24,
            300,
            {
                "float32": 30.3,
                "tfloat32": 120 / 2,
                "bfloat16": 242 / 2,
                "float16": 242 / 2,
                "float8": 485 / 2,
                "int8": 485 / 2,
            },
            "PCIe Gen4 x16",
            64 / 2,
            _L4_DATASHEET,
        ),
        # Dense figures of the MI300X datasheet (float32: its vector and matrix peaks are
        # both 163.4). Seven Infinity Fabric links of 128 GB/s (both ways) join each GPU to
        # the seven others of a platform: 896 GB/s in all, 448 per direction.
        _device(
            "mi300x",
            "AMD Instinct MI300X 192GB",
            192,
            5300,
            {
                "float32": 163.4,
                "tfloat32": 653.7,
                "bfloat16": 1307.4,
                "float16": 1307.4,
                "float8": 2614.9,
                "int8": 2614.9,
            },
            "Infinity Fabric",
            7 * 128 / 2,
            _MI300X_DATASHEET,
        ),
    )
}


def device_spec(name: str) -> DeviceSpec:
    """The device called `name`, in any case ("H100-SXM" is h100-sxm)."""
    spec = DEVICES.get(str(name).lower())
    if spec is None:
        names = ", ".join(DEVICES)
        raise FieldError(
            "gpu", name, f"is not one of: {names}{closest(str(name).lower(), DEVICES)}"
        )
    return spec


def flops_for(device: DeviceSpec, dtype: str) -> float:
    """The dense peak FLOP/s of `device` for matmuls in `dtype`. float32 is the plain FP32
    peak, torch's default (TF32 off): ask for "tfloat32" for the tensor-core one."""
    name = canonical_dtype(dtype) or str(dtype)
    peak = device.dense_flops.get(_PEAK_NAME.get(name, name))
    if peak is None:
        known = ", ".join(device.dense_flops)
        raise FieldError("dtype", dtype, f"{device.name} has no published peak; it has: {known}")
    return peak


def measured_device(environment: Mapping[str, Any]) -> DeviceSpec:
    """This machine as a run measured it: the copy bandwidth and the matmul FLOP/s per
    dtype of a results environment, named THIS_DEVICE, titled by the device the run
    used. A run probes its peaks before its timed points and after them: the mean of the
    probes (peak_gbps_probes, peak_tflops_probes) stands for the run, where there are
    several, else the first (peak_gbps, peak_tflops). It has no interconnect: a
    prediction over several of its GPUs needs a named device. FieldError naming `gpu`
    when the run measured no peaks (a study with no timed section)."""
    gbps, tflops = environment.get("peak_gbps"), dict(environment.get("peak_tflops") or {})
    gbps = _mean(environment.get("peak_gbps_probes")) or gbps
    for dtype, probes in (environment.get("peak_tflops_probes") or {}).items():
        tflops[dtype] = _mean(probes) or tflops.get(dtype)
    if not gbps or not tflops:
        raise FieldError(
            "gpu", THIS_DEVICE, "needs the peaks a timed run measured; this one has none"
        )
    threads = environment.get("num_threads")
    where = environment.get("device_name") or environment.get("device") or "this machine"
    title = f"{where}, {threads} thread(s)" if str(environment.get("device")) == "cpu" else where
    return DeviceSpec(
        name=THIS_DEVICE,
        title=title,
        memory_bytes=int(environment.get("gpu_memory_bytes") or 0),
        memory_bandwidth=float(gbps) * _G,
        dense_flops=MappingProxyType({d: float(v) * _T for d, v in tflops.items()}),
        interconnect_bandwidth=None,
        interconnect="none",
        sources=(
            f"measured: copy {float(gbps):.1f} GB/s, matmul "
            + ", ".join(f"{d} {float(v) * 1e3:.0f} GFLOP/s" for d, v in tflops.items()),
        ),
    )


def _mean(values: Any) -> float | None:
    """The mean of a list of readings (None for none, or a reading that is not a number)."""
    if not isinstance(values, list) or not values:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return sum(values) / len(values)
