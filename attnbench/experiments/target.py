"""The device a prediction is made on and the performance model it is made with, resolved
in one place for `predict`, `fit` and a calibration alike.

A device is a named GPU (its measured figures, model/devices.py) or THIS_DEVICE: this
machine as a run measured it (the peaks in the run's environment). A model is the
roofline's stated defaults, or a calibration file's (model/calibration.py), whose
efficiencies are shares of the peaks of the device it was fitted against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import FieldError, UsageError, brief
from ..model.architecture import ModelSpec, StoredWeights
from ..model.calibration import MEASURED_PEAKS, PEAK_RANGE, load_calibration
from ..model.devices import THIS_DEVICE, DeviceSpec, device_spec, measured_device, peak_name
from ..model.roofline import DEFAULT_MODEL, PerfModel
from ..model.weights import FLOAT8_WEIGHTS

#: The readings of each probe a run keeps beside its first peaks: a point is predicted on
#: the peaks its run measured before it, not on the mean of every probe.
PROBES = ("peak_gbps_probes", "peak_tflops_probes")


@dataclass(frozen=True)
class Target:
    """Where and how a prediction is made: the device whose peaks time it, and the
    roofline's parameters."""

    device: DeviceSpec
    model: PerfModel


def is_this(gpu: str | None) -> bool:
    """Whether `gpu` names this machine (THIS_DEVICE, in any case)."""
    return gpu is not None and str(gpu).lower() == THIS_DEVICE


def target_device(
    gpu: str, environment: Mapping[str, Any] | None = None, source: str | None = None
) -> DeviceSpec:
    """The device `gpu` names: a named GPU's figures, or for THIS_DEVICE this machine as
    the run whose `environment` measured its peaks. FieldError naming gpu when that
    environment holds no peaks; with `source` (the results file the environment was read
    from), every problem of its peaks is a UsageError naming the file instead."""
    if not is_this(gpu):
        return device_spec(gpu)
    environment = environment or {}
    if source is None:
        return measured_device(environment)
    for key, valid in MEASURED_PEAKS.items():
        value = environment.get(key)
        if value is not None and not valid(value):
            low, high = PEAK_RANGE
            raise UsageError(
                f"{source}: environment.{key}: {brief(value)} is not a measured peak as a "
                f"run records it (GB/s, or TFLOPS by dtype, from {low:g} to {high:g})"
            )
    try:
        return measured_device(environment)
    except FieldError:
        raise UsageError(
            f"{source}: no peaks measured in its environment (peak_gbps, peak_tflops): "
            "name the GPU whose peaks to use"
        ) from None


def run_peaks(
    environment: Mapping[str, Any], peak_gbps: float | None, peak_tflops: Mapping[str, float]
) -> dict[str, Any]:
    """A run's environment with the peaks it measured before its points (a context's),
    the later probes left out: what this machine is predicted on."""
    kept = {k: v for k, v in environment.items() if k not in PROBES}
    return {**kept, "peak_gbps": peak_gbps, "peak_tflops": dict(peak_tflops)}


def perf_model(calibration: str | None, device: DeviceSpec) -> PerfModel:
    """The performance model of a calibration file fitted against `device` (FieldError
    naming the file when it was another's), else the stated defaults."""
    if calibration is None:
        return DEFAULT_MODEL
    return load_calibration(calibration).model_for(device, calibration)


def target(
    gpu: str,
    calibration: str | None = None,
    environment: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> Target:
    """The device `gpu` names (see target_device) and the model of `calibration` on it."""
    device = target_device(gpu, environment, source)
    return Target(device, perf_model(calibration, device))


#: vLLM runs a float8 checkpoint on a GPU without float8 tensor cores as weight-only
#: W8A16 (FP8 Marlin): its 8-bit weights dequantised in the kernel, the matmuls in the
#: activations' dtype.
W8A16_SOURCE = "https://docs.vllm.ai/en/stable/features/quantization/fp8/"


def served_weights(spec: ModelSpec, gpu: str | None) -> StoredWeights | None:
    """A quantised checkpoint's weights as an engine serves them on `gpu`: as stored
    (ModelSpec.stored_weights), but float8 weights on a GPU without a float8 rate as
    8-bit weight-only ones, int8's bytes and dequantisation (W8A16_SOURCE). None for a
    checkpoint stored unquantised; as stored where `gpu` is none or not a named GPU (its
    check says why)."""
    stored = spec.stored_weights
    if stored is None or stored.dtype not in FLOAT8_WEIGHTS or gpu is None:
        return stored
    try:
        device = device_spec(gpu)
    except FieldError:
        return stored
    return (
        stored if peak_name(stored.dtype) in device.dense_flops else replace(stored, dtype="int8")
    )


def checkpoint_weights(spec: ModelSpec, point: Mapping[str, Any]) -> dict[str, Any]:
    """The weights fields a quantised checkpoint gives a point that sets no weights_dtype:
    as it stores them, as the point's GPU serves them (served_weights); none for a
    checkpoint stored unquantised or a point that sets its weights. fit's model defaults,
    and part of predict's."""
    stored = served_weights(spec, point.get("gpu"))
    if stored is None or point.get("weights_dtype") is not None:
        return {}
    return {
        "weights_dtype": stored.dtype,
        "weights_group": stored.group,
        "keep_attention": stored.keep_attention,
    }
