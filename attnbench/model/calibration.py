"""Calibrating the roofline model (model/roofline.py) on measured samples, checking it
against them, and reading a calibration file.

A Sample is one measured time with the bytes and FLOPs it moved and computed
(experiments/calibrate.py reads them from a run's decode records: each cached step, and
each timed prefill).

The fit: each sample's time is t = u * a + w * k + v * c + o, the roofline's sum, with
a = (bytes - kv_bytes) / bandwidth, k = kv_bytes / bandwidth and c = flops / peak (the
times at the peaks), u = 1 / efficiency_bw, w = 1 / efficiency_kv, v = 1 /
efficiency_flops and o the overhead: linear in (u, w, v, o), solved by least squares on
the relative error (each row divided by its measured t). The solve is bounded: each
efficiency at most MAX_EFFICIENCY, the overhead at least 0; a fit held at the bound says
so in its `source` (samples faster than the peaks allow: they ran from a cache, or the
peaks are another device's). Samples that read no KV cache, or whose cache bytes rise and
fall with their other bytes, leave efficiency_kv unset (efficiency_bw); samples whose
FLOPs rise and fall with their bytes leave efficiency_flops at its default.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

from ..errors import FieldError, UsageError, closest, spelled, typed
from .devices import THIS_DEVICE, DeviceSpec, device_spec, measured_device
from .files import json_int, json_problem, not_text, read_user_file, shown_path, unique_keys
from .roofline import (
    DEFAULT_MODEL,
    MAX_EFFICIENCY,
    PerfModel,
    is_number,
    predict,
)
from .units import format_duration

if TYPE_CHECKING:
    import numpy as np

#: Samples shorter than this are left out of a fit and a check, whatever the floor asked
#: for: timer resolution and launch jitter dominate them, and a time of 0 (a rounded
#: reading) would make every relative error infinite.
MIN_TIME_S = 1e-6
#: The fewest samples a fit accepts: four unknowns.
MIN_SAMPLES = 4
#: The kinds of sample: a cached decode step, and a prefill.
STEP, PREFILL = "step", "prefill"
#: The largest overhead per layer's step a calibration may hold: a second is no launch
#: cost, and a larger one would make a whole model's predicted times overflow.
MAX_OVERHEAD_S = 1.0
#: The peaks a calibration of this machine may record: GB/s and TFLOPS, from a slow
#: embedded core to a million times any GPU.
PEAK_RANGE = (1e-3, 1e9)
#: The largest calibration file read: a few fields and the run's environment.
MAX_CALIBRATION_BYTES = 1 << 20


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
    #: A step over a paged cache: checked, but no calibration sample (its block table's
    #: gathers are no part of the roofline's bytes).
    paged: bool = False
    #: The file and record it came from, for an error: 'run.json: decode record 3'.
    where: str = field(default="", compare=False)


def _peak(peaks: Mapping[str, float], sample: Sample) -> float:
    """The device's peak FLOP/s in the sample's dtype: FieldError, at the sample's record
    when it came from one, for a dtype the device has none for."""
    dtype = sample.dtype
    if dtype not in peaks:
        error = FieldError("dtype", dtype, f"no peak FLOP/s given for it{closest(dtype, peaks)}")
        raise error.located(f"{sample.where}: dtype {dtype}") if sample.where else error
    return peaks[dtype]


def _attention_peak(
    peaks: Mapping[str, float], attention: Mapping[str, float] | None, sample: Sample
) -> float:
    """The FLOP/s the sample's attention core runs at: the attention kernel's rate in its
    dtype where given, else the matmul's."""
    matmul = _peak(peaks, sample)
    return (attention or {}).get(sample.dtype) or matmul


def _flops_s(
    sample: Sample, peaks: Mapping[str, float], attention: Mapping[str, float] | None
) -> float:
    """Seconds of the sample's FLOPs at full efficiency: the attention core's at the
    attention rate, the rest at the matmul's."""
    core = sample.attention_flops
    return (sample.flops - core) / _peak(peaks, sample) + core / _attention_peak(
        peaks, attention, sample
    )


def usable(samples: Sequence[Sample], min_time_s: float) -> list[Sample]:
    """The samples measured at `min_time_s` or more, and never under MIN_TIME_S."""
    floor = max(min_time_s, MIN_TIME_S)
    return [s for s in samples if s.time_s >= floor]


def floor_text(min_time_s: float) -> str:
    """' of 1 s or more' for a floor a user set (min_time), '' for none."""
    return f" of {format_duration(min_time_s)} or more" if min_time_s > MIN_TIME_S else ""


def calibrate(
    samples: Sequence[Sample],
    bandwidth: float,
    peak_flops_by_dtype: Mapping[str, float],
    min_time_s: float = MIN_TIME_S,
    source: str = "the samples",
    attention_flops_by_dtype: Mapping[str, float] | None = None,
) -> PerfModel:
    """The model that fits `samples` best in relative error (see the module's notes);
    UsageError when too few samples are left or the fit is degenerate. `source` names
    where the samples came from (a file). Steps over a paged cache are no samples of it.
    A sample's attention core computes at `attention_flops_by_dtype` (a device's attention
    kernel's rate; default: the matmul's), as a prediction times it."""
    import numpy as np  # here: the commands that only read a calibration start without it

    kept = usable([s for s in samples if not s.paged], min_time_s)
    if len(kept) < MIN_SAMPLES:
        raise UsageError(
            f"{source}: calibration needs at least {MIN_SAMPLES} timed samples"
            f"{floor_text(min_time_s)}, got {len(kept)}"
        )
    t = np.array([s.time_s for s in kept])
    dense = np.array([(s.bytes - s.kv_bytes) / bandwidth for s in kept])
    kv = np.array([s.kv_bytes / bandwidth for s in kept])
    flops = np.array([_flops_s(s, peak_flops_by_dtype, attention_flops_by_dtype) for s in kept])
    split = bool(kv.any()) and _rank([dense / t, kv / t]) == 2
    memory = [dense, kv] if split else [dense + kv]
    # FLOPs that rise and fall with the bytes cannot tell compute from bandwidth
    told = _rank([c / t for c in [*memory, flops]]) == len(memory) + 1
    columns = [*memory, flops] if told else memory
    v_held = 1 / DEFAULT_MODEL.efficiency_flops
    target = t if told else t - v_held * flops
    lowest = [1 / MAX_EFFICIENCY] * len(columns) + [0.0]
    *inverse, o = _bounded_lstsq([c / t for c in [*columns, np.ones_like(t)]], target / t, lowest)
    u, w = inverse[0], inverse[1] if split else None
    v = inverse[-1] if told else v_held
    fitted = {"efficiency_bw": u, "efficiency_flops": v, **({"efficiency_kv": w} if split else {})}
    limited = [name for name, x in fitted.items() if x <= 1 / MAX_EFFICIENCY * (1 + 1e-9)]
    note = "" if told else "; efficiency_flops left at its default: the FLOPs follow the bytes"
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
        efficiency_kv=float(1 / w) if w is not None else None,
    )


def _kinds(samples: Sequence[Sample]) -> str:
    """'24 steps', '24 steps and 6 prefills'."""
    counts = {kind: sum(s.kind == kind for s in samples) for kind in (STEP, PREFILL)}
    return " and ".join(f"{n} {kind}{'s' * (n != 1)}" for kind, n in counts.items() if n)


def _rank(columns: list[np.ndarray]) -> int:
    import numpy as np

    return int(np.linalg.matrix_rank(np.stack(columns, axis=1)))


def _bounded_lstsq(
    columns: list[np.ndarray], target: np.ndarray, lowest: list[float]
) -> np.ndarray:
    """The least squares solution x of columns @ x = target with x >= lowest, found
    among the solutions with each coefficient free or held at its bound (at most four
    coefficients: sixteen small solves); UsageError when the columns are degenerate."""
    import numpy as np

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
    attention_flops_by_dtype: Mapping[str, float] | None = None,
) -> list[CheckRow]:
    """The model's prediction for every sample, beside its measured time; the attention
    core at `attention_flops_by_dtype` where given (see calibrate)."""
    rows = []
    for s in samples:
        peak = _peak(peak_flops_by_dtype, s)
        roof = predict(
            s.bytes,
            s.flops,
            bandwidth,
            peak,
            model,
            kv_bytes=s.kv_bytes,
            attention_flops=s.attention_flops,
            kernel_flops=s.attention_flops,
            kernel_peak_flops=_attention_peak(peak_flops_by_dtype, attention_flops_by_dtype, s),
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


def _measured(value: Any) -> bool:
    return is_number(value) and PEAK_RANGE[0] <= value <= PEAK_RANGE[1]


def _probes(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_measured(v) for v in value)


def _by_dtype(valid: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and valid(v) for k, v in value.items()
        )

    return check


#: The peaks a run's environment records, each as a run writes it: the copy bandwidth
#: and its probes, the matmul throughput by dtype and its probes.
MEASURED_PEAKS: dict[str, Callable[[Any], bool]] = {
    "peak_gbps": _measured,
    "peak_gbps_probes": _probes,
    "peak_tflops": _by_dtype(_measured),
    "peak_tflops_probes": _by_dtype(_probes),
}


def report_dict(report: CheckReport, checked: str) -> dict[str, Any]:
    """A check as JSON: the run checked, the device and model, and every row."""
    device = report.device
    return {
        "checked": checked,
        "device": device.name,
        "peak_gbps": device.memory_bandwidth / 1e9,
        "peak_tflops": {d: v / 1e12 for d, v in device.dense_flops.items()},
        "model": model_dict(report.model),
        "min_time_s": report.min_time_s,
        "median_abs_error": report.median_abs_error,
        "rows": [
            {
                "sample": r.sample.label,
                "kind": r.sample.kind,
                "paged": r.sample.paged,
                "measured_s": r.measured_s,
                "predicted_s": r.predicted_s,
                "rel_error": r.rel_error,
                "bound": r.bound,
                "bytes": r.sample.bytes,
                "flops": r.sample.flops,
                "kv_bytes": r.sample.kv_bytes,
            }
            for r in report.rows
        ],
    }


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
    #: The file it was read from, or the run it was fitted on, for a message.
    path: str = "calibration"

    def model_for(self, device: DeviceSpec, path: str) -> PerfModel:
        """The model, for a prediction on `device`: FieldError naming the calibration
        file (`path`) when it was fitted against another device's peaks."""
        if self.device is not None and self.device.name != device.name:
            raise FieldError(
                "calibration",
                path,
                f"was fitted against {peaks_of(self.device.name)}, not {peaks_of(device.name)}",
            )
        return self.model


def peaks_of(device: str) -> str:
    """Whose peaks a calibration was fitted against, in words: "h100-sxm's peaks", "this
    machine's measured peaks"."""
    return "this machine's measured peaks" if device.lower() == THIS_DEVICE else f"{device}'s peaks"


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
    bad field and its value, at the file, or the calibration field itself for a file
    that cannot be read (see files.read_user_file) or is no JSON object; UsageError for
    a missing or unknown field. A file of the model alone (no gpu) has no device: its
    efficiencies apply to any."""
    doc, where = _read(path_or_dict)
    if "schema_version" in doc and ("records" in doc or "sections" in doc):
        raise UsageError(
            f"{where}: a results file, not a calibration file: a calibration is fitted "
            "from the timed steps of one"
        )
    known = (*MODEL_FIELDS, *DEVICE_FIELDS)
    unknown = [k for k in doc if k not in known]
    if unknown:
        raise UsageError(f"{where}: unknown field {unknown[0]!r}{closest(unknown[0], known)}")
    missing = [k for k, required in MODEL_FIELDS.items() if required and k not in doc]
    if missing:
        raise UsageError(f"{where}: missing field {missing[0]!r}")
    try:
        return parse_calibration(doc, where)
    except FieldError as exc:  # a field of the file, not a flag: say which file
        raise exc.located(f"{where}: {exc.field} {spelled(exc.value)}") from None


def parse_calibration(doc: Mapping[str, Any], where: str) -> Calibration:
    source = doc.get("source", f"loaded from {where}")
    if not isinstance(source, str):
        raise FieldError("source", source, "must be text")
    if not source.isprintable():  # shown in notes: a line break or an escape, quoted
        source = typed(source)
    overhead = doc["overhead_s"]
    if is_number(overhead) and overhead > MAX_OVERHEAD_S:
        raise FieldError("overhead_s", overhead, f"must be at most {MAX_OVERHEAD_S:g} s per layer")
    model = PerfModel(
        doc["efficiency_bw"],
        doc["efficiency_flops"],
        overhead,
        source,
        efficiency_kv=doc.get("efficiency_kv"),
    )
    environment = doc.get("environment") or {}
    if not isinstance(environment, Mapping):
        raise FieldError("environment", environment, "must be a mapping")
    return Calibration(model, _calibrated_device(doc, environment), environment, where)


def _read(path_or_dict: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if isinstance(path_or_dict, Mapping):
        doc, where = path_or_dict, "calibration"
    else:
        where = str(shown_path(path_or_dict))
        text = read_user_file(Path(path_or_dict), "calibration", MAX_CALIBRATION_BYTES)
        try:
            doc = json.loads(
                text, object_pairs_hook=lambda pairs: unique_keys(pairs, where), parse_int=json_int
            )
        except json.JSONDecodeError as exc:
            reason = f"not valid JSON ({json_problem(exc)})"
            raise FieldError("calibration", where, reason) from None
        except RecursionError:
            raise FieldError("calibration", where, "JSON nested too deeply") from None
        except ValueError as exc:  # an integer of too many digits (json_int)
            raise FieldError("calibration", where, f"not valid JSON ({exc})") from None
        if bad := not_text(doc, text):
            raise FieldError("calibration", where, bad)
    if not isinstance(doc, Mapping):
        raise FieldError(
            "calibration",
            where,
            f"a calibration file is a JSON object of {', '.join(MODEL_FIELDS)}",
        )
    return doc, where


def _calibrated_device(doc: Mapping[str, Any], environment: Mapping[str, Any]) -> DeviceSpec | None:
    """The device a calibration file's efficiencies are shares of: a named GPU, this
    machine's peaks as the file records them, or none (a file that names no gpu)."""
    gpu = doc.get("gpu")
    if gpu is None:
        return None
    if not isinstance(gpu, str):
        raise FieldError("gpu", gpu, "must be a GPU's name")
    if gpu != THIS_DEVICE:
        return device_spec(gpu)
    gbps, tflops = doc.get("peak_gbps"), doc.get("peak_tflops")
    low, high = PEAK_RANGE
    if not MEASURED_PEAKS["peak_gbps"](gbps):
        raise FieldError(
            "peak_gbps",
            gbps,
            f"gpu {THIS_DEVICE} needs the peak GB/s measured ({low:g} to {high:g})",
        )
    if not tflops or not MEASURED_PEAKS["peak_tflops"](tflops):
        raise FieldError(
            "peak_tflops", tflops, f"must map dtypes to TFLOPS from {low:g} to {high:g}"
        )
    return measured_device({**environment, "peak_gbps": gbps, "peak_tflops": tflops})
