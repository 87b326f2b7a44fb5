"""Calibrating the roofline model (model/roofline.py) on measured decode runs, checking it
against them, and reading a calibration file.

Samples come from a results document's decode records: the cached step of each timed
point (bytes_per_step, flops_per_step, step_ms_median) and, where it was timed, its
prefill (prefill_flops, prefill_ms_median). A record carries no prefill bytes: they are
counted as one layer's step of S new tokens attending S keys (roofline.layer_counts: the
weights, the prompt's K/V written and read back, and its activations). Points under
tensor parallelism are left out: their step includes the all-reduces, which the
single-device roofline does not see.

The fit: each sample's time is t = max(u * a + w * k, v * c) + o, with a = (bytes -
kv_bytes) / bandwidth, k = kv_bytes / bandwidth and c = flops / peak (the times at the
peaks), u = 1 / efficiency_bw, w = 1 / efficiency_kv, v = 1 / efficiency_flops and o the
overhead. Once every sample is assigned the bound it sits on, t is linear in (u, w, v, o);
the fit alternates between assigning the bounds (from the defaults first, then from the
last fit) and solving the linear least squares on the relative error (each row divided by
its measured t), until the assignment no longer changes; where assignments cycle (samples
near the ridge), it keeps the fit whose own error, max() and all, is least. The solve is
bounded: each efficiency at most MAX_EFFICIENCY, the overhead at least 0; a fit held at
the bound says so in its `source` (samples faster than the peaks allow: they ran from a
cache, or the peaks are another device's). A bound no sample sits on leaves its
efficiency at the default, and the model's `source` says so; samples that read no KV
cache, or whose cache bytes rise and fall with their other bytes, leave efficiency_kv
unset (efficiency_bw).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from ..errors import FieldError, UsageError, closest, show_value
from .devices import THIS_DEVICE, DeviceSpec, device_spec, measured_device
from .formulas import attention_core_flops
from .roofline import (
    DEFAULT_MODEL,
    MAX_EFFICIENCY,
    ModelCounts,
    PerfModel,
    is_number,
    layer_counts,
    predict,
)
from .shapes import AttentionShape

#: Samples shorter than this are left out of a fit: timer resolution and launch jitter
#: dominate them.
MIN_TIME_S = 1e-6
#: The fewest samples a fit accepts: four unknowns.
MIN_SAMPLES = 4
#: The most rounds of assigning bounds and solving: an assignment that cycles keeps the
#: best fit seen.
MAX_ROUNDS = 50
#: The kinds of sample: a cached decode step, and a prefill.
STEP, PREFILL = "step", "prefill"


@dataclass(frozen=True)
class Sample:
    """One measured time, with the bytes and FLOPs it moved and computed; `kv_bytes` of
    the bytes are the KV cache the attention read."""

    bytes: int
    flops: int
    time_s: float
    dtype: str
    kind: str
    kv_bytes: int = 0
    #: What was measured, for a reader: 'step d4096 h32/8 b4 s1024'.
    label: str = ""
    #: Of the FLOPs, the attention core's (QK^T and PV), on its own roofline.
    attention_flops: int = 0


def samples_from_results(doc: Mapping[str, Any], provider: str | None = None) -> list[Sample]:
    """The samples of a results document's decode records (of `provider` alone when given):
    a study's (sections.decode.records) or decode-speed's (its top-level records). A
    record is timed when it holds a step time (only ok and noisy points do)."""
    samples = []
    for r in _decode_records(doc):
        if r.get("mode") != "cache" or r.get("tp", 1) != 1 or r.get("step_ms_median") is None:
            continue
        if provider is not None and r.get("provider") != provider:
            continue
        if r.get("bytes_per_step") and r.get("flops_per_step") is not None:
            samples.append(_step_sample(r))
        if r.get("prefill_ms_median") is not None and r.get("prefill_flops") is not None:
            counts = record_prefill_counts(r)
            samples.append(
                Sample(
                    counts.bytes,
                    r["prefill_flops"],
                    r["prefill_ms_median"] * 1e-3,
                    r["dtype"],
                    PREFILL,
                    counts.kv_bytes,
                    f"{PREFILL} {_point(r)}",
                    counts.attention_flops,
                )
            )
    return samples


def _step_sample(record: Mapping[str, Any]) -> Sample:
    """A record's cached step: its bytes and FLOPs, the cache it read, and its attention
    core's FLOPs (QK^T and PV over the context, for a uniform batch; a batch given
    sequence by sequence counts all its FLOPs as dense)."""
    core = 0
    if record.get("batch_spec") is None:
        keys = record["prompt_len"] + 1
        core = attention_core_flops(_shape(record), record["batch"], 1, keys, causal=True)
    return Sample(
        record["bytes_per_step"],
        record["flops_per_step"],
        record["step_ms_median"] * 1e-3,
        record["dtype"],
        STEP,
        record.get("kv_bytes_per_gpu") or 0,
        f"{STEP} {_point(record)}",
        core,
    )


def _shape(record: Mapping[str, Any]) -> AttentionShape:
    return AttentionShape(
        record["d_model"], record["num_heads"], record["num_kv_heads"], record["head_dim"]
    )


def _point(record: Mapping[str, Any]) -> str:
    """A record's point in a few characters: 'd4096 h32/8 b4 s1024 float32'."""
    shape = f"d{record['d_model']} h{record['num_heads']}/{record['num_kv_heads']}"
    provider = record.get("provider")
    tail = f" {provider}" if provider and provider != "attnbench" else ""
    return f"{shape} b{record['batch']} s{record['prompt_len']}{tail}"


def _decode_records(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if "sections" in doc:
        return ((doc["sections"] or {}).get("decode") or {}).get("records") or []
    if doc.get("command") != "decode-speed":
        return []
    return doc.get("records") or []


def record_prefill_counts(record: Mapping[str, Any]) -> ModelCounts:
    """The counts of a record's prefill of prompt_len tokens: one layer's step of
    prompt_len new tokens attending prompt_len keys (roofline.layer_counts)."""
    prompt = record["prompt_len"]
    return layer_counts(_shape(record), record["batch"], prompt, prompt, record["dtype"])


def _peak(peaks: Mapping[str, float], dtype: str) -> float:
    if dtype not in peaks:
        raise FieldError("dtype", dtype, f"no peak FLOP/s given for it{closest(dtype, peaks)}")
    return peaks[dtype]


def calibrate(
    samples: Sequence[Sample],
    bandwidth: float,
    peak_flops_by_dtype: Mapping[str, float],
    min_time_s: float = MIN_TIME_S,
    source: str = "the samples",
) -> PerfModel:
    """The model that fits `samples` best in relative error (see the module's notes);
    UsageError when too few samples are left or the fit is degenerate. `source` names
    where the samples came from (a file)."""
    kept = [s for s in samples if s.time_s >= min_time_s]
    if len(kept) < MIN_SAMPLES:
        raise UsageError(
            f"calibration needs at least {MIN_SAMPLES} timed samples of "
            f"{min_time_s * 1e6:g} us or more, got {len(kept)}"
        )
    peaks = np.array([_peak(peak_flops_by_dtype, s.dtype) for s in kept])
    parts = _Parts(
        dense_s=np.array([(s.bytes - s.kv_bytes) / bandwidth for s in kept]),
        kv_s=np.array([s.kv_bytes / bandwidth for s in kept]),
        dense_flops_s=np.array([s.flops - s.attention_flops for s in kept]) / peaks,
        core_flops_s=np.array([s.attention_flops for s in kept]) / peaks,
        time_s=np.array([s.time_s for s in kept]),
    )
    u = w = 1 / DEFAULT_MODEL.efficiency_bw
    v = 1 / DEFAULT_MODEL.efficiency_flops
    bounds = parts.bounds(u, w, v)
    best: tuple[float, tuple] | None = None
    for _ in range(MAX_ROUNDS):
        fit = _solve(parts, bounds, (u, w, v))
        u, w, v, o, split = fit
        loss = parts.loss(u, w, v, o)
        if best is None or loss < best[0]:
            best = (loss, (*fit, bounds))
        new = parts.bounds(u, w, v)
        if all((x == y).all() for x, y in zip(new, bounds, strict=True)):
            break
        bounds = new
    # settled, or cycling between assignments: the best fit seen, by the model's own error
    u, w, v, o, split, bounds = best[1]  # type: ignore[index]
    note = ""
    dense_compute, core_compute = bounds
    if dense_compute.all() and (core_compute | (parts.kv_s == 0)).all():
        note = "; efficiency_bw left at its default: no memory-bound sample"
    elif not dense_compute.any() and not core_compute.any():
        note = "; efficiency_flops left at its default: no compute-bound sample"
    fitted = {"efficiency_bw": u, "efficiency_flops": v, **({"efficiency_kv": w} if split else {})}
    limited = [
        name for name, inverse in fitted.items() if inverse <= 1 / MAX_EFFICIENCY * (1 + 1e-9)
    ]
    if limited:
        note += (
            f"; {' and '.join(limited)} held at the limit {MAX_EFFICIENCY}: "
            "the samples ran faster than the peaks allow (from a cache, or the peaks are "
            "another device's)"
        )
    return PerfModel(
        float(1 / u),
        float(1 / v),
        float(o),
        f"calibrated on {_kinds(kept)} of {source}{note}",
        efficiency_kv=float(1 / w) if split else None,
    )


def _kinds(samples: Sequence[Sample]) -> str:
    """'24 steps', '24 steps and 6 prefills'."""
    counts = {kind: sum(s.kind == kind for s in samples) for kind in (STEP, PREFILL)}
    return " and ".join(f"{n} {kind}{'s' * (n != 1)}" for kind, n in counts.items() if n)


@dataclass(frozen=True)
class _Parts:
    """The samples' times at the peaks, part by part (the roofline's two kernels): the
    dense matmuls' bytes and FLOPs, the attention core's cache bytes and FLOPs."""

    dense_s: np.ndarray
    kv_s: np.ndarray
    dense_flops_s: np.ndarray
    core_flops_s: np.ndarray
    time_s: np.ndarray

    def bounds(self, u: float, w: float, v: float) -> tuple[np.ndarray, np.ndarray]:
        """Whether each sample's dense part, and its attention core, is compute-bound."""
        return v * self.dense_flops_s > u * self.dense_s, v * self.core_flops_s > w * self.kv_s

    def loss(self, u: float, w: float, v: float, o: float) -> float:
        """The sum of squared relative errors of the model (u, w, v, o) over the samples."""
        dense = np.maximum(u * self.dense_s, v * self.dense_flops_s)
        core = np.maximum(w * self.kv_s, v * self.core_flops_s)
        return float((((dense + core + o) / self.time_s - 1) ** 2).sum())


def _solve(
    parts: _Parts,
    bounds: tuple[np.ndarray, np.ndarray],
    held: tuple[float, float, float],
) -> tuple[float, float, float, float, bool]:
    """(u, w, v, o, split) of the least relative squares with each sample's parts on their
    `bounds` (compute, else memory), each efficiency at most MAX_EFFICIENCY and the
    overhead at least 0. The cache's coefficient w is fitted apart (`split`) when the
    samples whose core is memory-bound tell it from u, else it is u; a coefficient no
    sample needs keeps its value (`held`)."""
    dense_compute, core_compute = bounds
    t = parts.time_s
    columns = {
        0: np.where(dense_compute, 0.0, parts.dense_s),
        1: np.where(core_compute, 0.0, parts.kv_s),
        2: np.where(dense_compute, parts.dense_flops_s, 0.0)
        + np.where(core_compute, parts.core_flops_s, 0.0),
        3: np.ones_like(t),
    }
    split = bool(columns[1].any()) and _rank([columns[0] / t, columns[1] / t]) == 2
    if not split:  # one coefficient for all the bytes
        columns[0], columns[1] = columns[0] + columns[1], np.zeros_like(t)
    values = dict(enumerate(held))
    free = [i for i in (0, 1, 2) if columns[i].any()] + [3]
    rest = t - sum(values[i] * columns[i] for i in (0, 1, 2) if i not in free)
    lowest = [1 / MAX_EFFICIENCY if i < 3 else 0.0 for i in free]
    fitted = _bounded_lstsq([columns[i] / t for i in free], rest / t, lowest)
    values.update(zip(free, map(float, fitted), strict=True))
    w = values[1] if split else values[0]
    return values[0], w, values[2], values[3], split


def _rank(columns: list[np.ndarray]) -> int:
    return int(np.linalg.matrix_rank(np.stack(columns, axis=1)))


def _bounded_lstsq(
    columns: list[np.ndarray], target: np.ndarray, lowest: list[float]
) -> np.ndarray:
    """The least squares solution x of columns @ x = target with x >= lowest, found
    among the solutions with each coefficient free or held at its bound (at most four
    coefficients: sixteen small solves); UsageError when the columns are degenerate."""
    matrix = np.stack(columns, axis=1)
    if np.linalg.matrix_rank(matrix) < matrix.shape[1]:
        raise UsageError(
            "calibration is degenerate: the samples do not tell bandwidth, compute and "
            "overhead apart (vary the context, batch or shape)"
        )
    floor = np.array(lowest)
    best, best_residual = floor, np.inf
    for held in itertools.product((False, True), repeat=len(lowest)):
        x = floor.copy()
        free = [i for i, h in enumerate(held) if not h]
        if free:
            rest = target - matrix[:, list(held)] @ floor[list(held)] if any(held) else target
            x[free] = np.linalg.lstsq(matrix[:, free], rest, rcond=None)[0]
        if (x < floor - 1e-12).any():
            continue
        residual = float(((matrix @ x - target) ** 2).sum())
        if residual < best_residual:
            best, best_residual = x, residual
    return best


@dataclass(frozen=True)
class CheckRow:
    """A sample, the model's time for it and the relative error (predicted / measured - 1)."""

    sample: Sample
    predicted_s: float
    bound: str

    @property
    def measured_s(self) -> float:
        return self.sample.time_s

    @property
    def rel_error(self) -> float:
        return self.predicted_s / self.sample.time_s - 1


def check(
    samples: Sequence[Sample],
    bandwidth: float,
    peak_flops_by_dtype: Mapping[str, float],
    model: PerfModel,
) -> list[CheckRow]:
    """The model's prediction for every sample, beside its measured time."""
    rows = []
    for s in samples:
        peak = _peak(peak_flops_by_dtype, s.dtype)
        roof = predict(
            s.bytes,
            s.flops,
            bandwidth,
            peak,
            model,
            kv_bytes=s.kv_bytes,
            attention_flops=s.attention_flops,
        )
        rows.append(CheckRow(s, roof.time_s, roof.bound))
    return rows


@dataclass(frozen=True)
class CheckReport:
    """A model checked against a measured run: every sample's row, the median of the
    |relative errors| and the worst row."""

    rows: list[CheckRow]
    model: PerfModel
    device: DeviceSpec
    min_time_s: float

    @property
    def median_abs_error(self) -> float:
        return median_abs_error(self.rows)

    @property
    def worst(self) -> CheckRow:
        return max(self.rows, key=lambda r: abs(r.rel_error))


def check_run(
    doc: Mapping[str, Any],
    calibration: Calibration | None,
    device: DeviceSpec | None,
    min_time_s: float = MIN_TIME_S,
) -> CheckReport:
    """The model of `calibration` (else the defaults) against every timed sample of a
    results document measured at `min_time_s` or more, on the peaks of the named GPU the
    calibration was fitted against, else `device`, else the ones the run measured (a
    calibration of THIS_DEVICE holds the efficiencies, as shares of whatever this machine
    measures at the time: here, the checked run's peaks)."""
    fitted = calibration.device if calibration is not None else None
    if fitted is not None and fitted.name != THIS_DEVICE:
        device = fitted
    device = device or measured_device(doc.get("environment") or {})
    model = calibration.model if calibration is not None else DEFAULT_MODEL
    samples = [s for s in samples_from_results(doc) if s.time_s >= min_time_s]
    if not samples:
        raise UsageError(
            f"no timed decode samples of {min_time_s * 1e3:g} ms or more to check against"
        )
    rows = check(samples, device.memory_bandwidth, device.dense_flops, model)
    return CheckReport(rows, model, device, min_time_s)


def median_abs_error(rows: Sequence[CheckRow]) -> float:
    """The median of |relative error| over `rows`."""
    if not rows:
        raise ValueError("no rows to take the median error of")
    return median(abs(r.rel_error) for r in rows)


#: The fields of a calibration file's model, and whether each must be given.
MODEL_FIELDS = {
    "efficiency_bw": True,
    "efficiency_kv": False,
    "efficiency_flops": True,
    "overhead_s": True,
    "source": False,
}
#: The other fields of a calibration file: the device whose peaks the efficiencies are
#: shares of (a named GPU, or THIS_DEVICE with the peaks the run measured) and the
#: environment of the run it was fitted on.
DEVICE_FIELDS = ("gpu", "peak_gbps", "peak_tflops", "environment")


@dataclass(frozen=True)
class Calibration:
    """A fitted model with the device it was fitted against and the run's environment:
    the efficiencies are shares of that device's peaks, so a prediction with them uses
    those peaks (for THIS_DEVICE: the ones the run measured). `device` None: a model
    written by hand, its efficiencies held against the peaks of whatever device is
    predicted."""

    model: PerfModel
    device: DeviceSpec | None
    environment: Mapping[str, Any]

    def model_for(self, device: DeviceSpec, path: str) -> PerfModel:
        """The model, for a prediction on `device`: FieldError naming the calibration
        file (`path`) when it was fitted against another device's peaks."""
        if self.device is not None and self.device.name != device.name:
            raise FieldError(
                "calibration",
                path,
                f"was fitted against {self.device.name}'s peaks, not {device.name}'s",
            )
        return self.model


def calibrate_run(
    doc: Mapping[str, Any],
    device: DeviceSpec | None,
    name: str,
    min_time_s: float = MIN_TIME_S,
) -> Calibration:
    """The calibration of a results document's timed decode records (`name`: the file),
    against `device`'s peaks, or the peaks the run measured when None."""
    environment = doc.get("environment") or {}
    device = device or measured_device(environment)
    samples = samples_from_results(doc)
    model = calibrate(samples, device.memory_bandwidth, device.dense_flops, min_time_s, name)
    return Calibration(model, device, environment)


def model_dict(model: PerfModel) -> dict[str, Any]:
    """A model as a calibration file holds it (load_calibration reads it back)."""
    return {name: getattr(model, name) for name in MODEL_FIELDS}


def calibration_dict(calibration: Calibration) -> dict[str, Any]:
    """A calibration as its file holds it (load_calibration reads it back)."""
    device = calibration.device
    doc = model_dict(calibration.model)
    if device is not None:
        doc["gpu"] = device.name
    if device is not None and device.name == THIS_DEVICE:
        doc["peak_gbps"] = device.memory_bandwidth / 1e9
        doc["peak_tflops"] = {d: v / 1e12 for d, v in device.dense_flops.items()}
    return {**doc, "environment": dict(calibration.environment)}


def load_calibration(path_or_dict: str | Path | Mapping[str, Any]) -> Calibration:
    """A calibration file (JSON) or its mapping, every field checked: FieldError naming a
    bad field and its value, UsageError for a missing or unknown one. A file of the model
    alone (no gpu) has no device: its efficiencies apply to any."""
    doc, where = _read(path_or_dict)
    known = (*MODEL_FIELDS, *DEVICE_FIELDS)
    unknown = [k for k in doc if k not in known]
    if unknown:
        raise UsageError(f"{where}: unknown field {unknown[0]!r}{closest(unknown[0], known)}")
    missing = [k for k, required in MODEL_FIELDS.items() if required and k not in doc]
    if missing:
        raise UsageError(f"{where}: missing field {missing[0]}")
    try:
        return _parse_calibration(doc, where)
    except FieldError as exc:  # a field of the file, not a flag: say which file
        raise exc.located(f"{where}: {exc.field} {show_value(exc.value)}") from None


def _parse_calibration(doc: Mapping[str, Any], where: str) -> Calibration:
    source = doc.get("source", f"loaded from {where}")
    if not isinstance(source, str):
        raise FieldError("source", source, "must be text")
    model = PerfModel(
        doc["efficiency_bw"],
        doc["efficiency_flops"],
        doc["overhead_s"],
        source,
        efficiency_kv=doc.get("efficiency_kv"),
    )
    environment = doc.get("environment") or {}
    if not isinstance(environment, Mapping):
        raise FieldError("environment", environment, "must be a mapping")
    return Calibration(model, _calibrated_device(doc, environment), environment)


def _read(path_or_dict: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if isinstance(path_or_dict, Mapping):
        doc, where = path_or_dict, "calibration"
    else:
        where = str(path_or_dict)
        try:
            doc = json.loads(Path(path_or_dict).read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{where}: cannot read a calibration file: {exc}") from None
    if not isinstance(doc, Mapping):
        raise UsageError(
            f"{where}: a calibration file is a JSON object of {', '.join(MODEL_FIELDS)}"
        )
    return doc, where


def _calibrated_device(doc: Mapping[str, Any], environment: Mapping[str, Any]) -> DeviceSpec | None:
    """The device a calibration file's efficiencies are shares of: a named GPU, this
    machine's peaks as the file records them, or none (a file that names no gpu)."""
    gpu = doc.get("gpu")
    if gpu is None:
        return None
    if gpu != THIS_DEVICE:
        return device_spec(gpu)
    gbps, tflops = doc.get("peak_gbps"), doc.get("peak_tflops")
    if not is_number(gbps) or gbps <= 0:
        raise FieldError("peak_gbps", gbps, f"gpu {THIS_DEVICE} needs the peak GB/s measured")
    if not isinstance(tflops, Mapping) or not all(is_number(v) and v > 0 for v in tflops.values()):
        raise FieldError("peak_tflops", tflops, "must map dtypes to TFLOPS above 0")
    return measured_device({**environment, "peak_gbps": gbps, "peak_tflops": tflops})
