"""Named GPUs by name (model/device_table.py holds them, model/device_types.py says what
each figure is), their matmul peak for a dtype, and this machine as a run measured it."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import FieldError, closest
from .device_table import DEVICES
from .device_types import LOAD_LATENCY, PEAK_DTYPES, Collectives, DeviceSpec
from .dtypes import canonical_dtype

__all__ = ["DEVICES", "LOAD_LATENCY", "PEAK_DTYPES", "THIS_DEVICE", "Collectives", "DeviceSpec"]

#: attnbench's dtypes whose peak goes by another name.
_PEAK_NAME = {"float8_e4m3fn": "float8", "float8_e5m2": "float8"}

#: The device name that stands for this machine: the peaks it measures, not a datasheet's.
THIS_DEVICE = "this"

_T = 1e12  # tera
_G = 1e9  # giga


def device_spec(name: str) -> DeviceSpec:
    """The device called `name`, in any case ("H100-SXM" is h100-sxm)."""
    spec = DEVICES.get(str(name).lower())
    if spec is None:
        names = ", ".join(DEVICES)
        raise FieldError(
            "gpu", name, f"is not one of: {names}{closest(str(name).lower(), DEVICES)}"
        )
    return spec


def peak_name(dtype: str) -> str:
    """The name of the peak a matmul in `dtype` runs at ("float8_e4m3fn" -> "float8")."""
    name = canonical_dtype(dtype) or str(dtype)
    return _PEAK_NAME.get(name, name)


def flops_for(device: DeviceSpec, dtype: str) -> float:
    """The dense matmul FLOP/s `device` reaches in `dtype` (measured: see device_types).
    float32 is the plain FP32 rate, torch's default (TF32 off): ask for "tfloat32" for the
    tensor-core one."""
    peak = device.dense_flops.get(peak_name(dtype))
    if peak is None:
        known = ", ".join(device.dense_flops)
        raise FieldError(
            "dtype", dtype, f"{device.name} has no {peak_name(dtype)} peak; it has: {known}"
        )
    return peak


def attention_flops_for(device: DeviceSpec, dtype: str) -> float:
    """The FLOP/s `device`'s attention core (QK^T and PV) runs at in `dtype`: a 16-bit
    attention kernel's measured rate where there is one, at most the matmul's
    (flops_for), else the matmul's."""
    matmul = flops_for(device, dtype)
    if device.attention_flops and peak_name(dtype) in ("bfloat16", "float16"):
        return min(matmul, device.attention_flops)
    return matmul


def attention_peaks(device: DeviceSpec) -> dict[str, float]:
    """The attention core's FLOP/s in each dtype `device` has a matmul peak for
    (attention_flops_for)."""
    return {dtype: attention_flops_for(device, dtype) for dtype in device.dense_flops}


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
    flops = MappingProxyType({d: float(v) * _T for d, v in tflops.items()})
    return DeviceSpec(
        name=THIS_DEVICE,
        title=title,
        memory_bytes=int(environment.get("gpu_memory_bytes") or 0),
        memory_bandwidth=float(gbps) * _G,
        dense_flops=flops,
        collectives=None,
        # the launches are the calibration's overhead per layer on this machine
        launch_s=0.0,
        interconnect="none",
        datasheet_bandwidth=float(gbps) * _G,
        datasheet_flops=flops,
        interconnect_bandwidth=None,
        sources=(
            f"measured: copy {float(gbps):.1f} GB/s, matmul "
            + ", ".join(f"{d} {float(v) * 1e3:.0f} GFLOP/s" for d, v in tflops.items()),
        ),
        bandwidth_source="this run's copy probes",
        flops_source="this run's matmul probes",
        launch_source="counted in the overhead per layer",
    )


def _mean(values: Any) -> float | None:
    """The mean of a list of readings (None for none, or a reading that is not a number)."""
    if not isinstance(values, list) or not values:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return sum(values) / len(values)
