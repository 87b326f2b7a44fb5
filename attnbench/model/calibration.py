"""Calibrating the roofline model (model/roofline.py) on measured decode runs, checking it
against them, and reading a calibration file.

Samples come from a results document's decode records: the cached step of each timed
point (bytes_per_step, flops_per_step, step_ms_median) and, where it was timed, its
prefill (prefill_flops, prefill_ms_median). A record carries no prefill bytes: they are
counted as formulas counts a cached step of S new tokens attending S keys, the weights
plus step_traffic_bytes(shape, B, S, S) (the prompt's K/V written and read back, and its
activations). Points under tensor parallelism are left out: their step includes the
all-reduces, which the single-device roofline does not see.

The fit: each sample's time is t = max(u * a + w * k, v * c) + o, with a = (bytes -
kv_bytes) / bandwidth, k = kv_bytes / bandwidth and c = flops / peak (the times at the
peaks), u = 1 / efficiency_bw, w = 1 / efficiency_kv, v = 1 / efficiency_flops and o the
overhead. Once every sample is assigned the bound it sits on, t is linear in (u, w, v, o);
the fit alternates between assigning the bounds (from the defaults first, then from the
last fit) and solving the linear least squares on the relative error (each row divided by
its measured t), until the assignment no longer changes. An overhead fitted below 0 is
refitted at 0. A bound no sample sits on leaves its efficiency at the default, and the
model's `source` says so; samples that read no KV cache, or whose cache bytes rise and
fall with their other bytes, leave efficiency_kv unset (efficiency_bw).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from ..errors import FieldError, UsageError, closest
from .formulas import step_traffic_bytes, weight_bytes
from .roofline import DEFAULT_MODEL, MAX_EFFICIENCY, PerfModel, predict
from .shapes import AttentionShape

#: Samples shorter than this are left out of a fit: timer resolution and launch jitter
#: dominate them.
MIN_TIME_S = 1e-6
#: The fewest samples a fit accepts: four unknowns.
MIN_SAMPLES = 4
#: The most rounds of assigning bounds and solving before the fit gives up.
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
            step_s = r["step_ms_median"] * 1e-3
            kv = r.get("kv_bytes_per_gpu") or 0
            samples.append(
                Sample(r["bytes_per_step"], r["flops_per_step"], step_s, r["dtype"], STEP, kv)
            )
        if r.get("prefill_ms_median") is not None and r.get("prefill_flops") is not None:
            prefill_s = r["prefill_ms_median"] * 1e-3
            bytes_ = prefill_bytes(r)
            samples.append(Sample(bytes_, r["prefill_flops"], prefill_s, r["dtype"], PREFILL))
    return samples


def _decode_records(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if "sections" in doc:
        return ((doc["sections"] or {}).get("decode") or {}).get("records") or []
    if doc.get("command") != "decode-speed":
        return []
    return doc.get("records") or []


def prefill_bytes(record: Mapping[str, Any]) -> int:
    """Bytes of a record's prefill of prompt_len tokens: the weights, and the traffic of
    one cached step of prompt_len new tokens attending prompt_len keys."""
    shape = AttentionShape(
        record["d_model"], record["num_heads"], record["num_kv_heads"], record["head_dim"]
    )
    dtype, prompt = record["dtype"], record["prompt_len"]
    traffic = step_traffic_bytes(shape, record["batch"], prompt, prompt, dtype)
    return weight_bytes(shape, dtype) + traffic


def _peak(peaks: Mapping[str, float], dtype: str) -> float:
    if dtype not in peaks:
        raise FieldError("dtype", dtype, f"no peak FLOP/s given for it{closest(dtype, peaks)}")
    return peaks[dtype]


def calibrate(
    samples: Sequence[Sample],
    bandwidth: float,
    peak_flops_by_dtype: Mapping[str, float],
    min_time_s: float = MIN_TIME_S,
    source: str = "samples",
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
    a = np.array([(s.bytes - s.kv_bytes) / bandwidth for s in kept])
    k = np.array([s.kv_bytes / bandwidth for s in kept])
    c = np.array([s.flops / _peak(peak_flops_by_dtype, s.dtype) for s in kept])
    t = np.array([s.time_s for s in kept])
    u = w = 1 / DEFAULT_MODEL.efficiency_bw
    v = 1 / DEFAULT_MODEL.efficiency_flops
    compute = v * c > u * a + w * k
    for _ in range(MAX_ROUNDS):
        u, w, v, o, split = _solve(a, k, c, t, compute, (u, w, v))
        bounds = v * c > u * a + w * k
        if (bounds == compute).all():
            break
        compute = bounds
    else:
        raise UsageError(
            f"calibration did not settle in {MAX_ROUNDS} rounds: the samples fit no roofline"
        )
    for name, inverse in (("efficiency_bw", u), ("efficiency_kv", w), ("efficiency_flops", v)):
        if not 1 / MAX_EFFICIENCY <= inverse < np.inf:
            raise UsageError(
                f"calibration gave {name} {1 / inverse if inverse else float('inf'):.3g}, "
                f"outside (0, {MAX_EFFICIENCY}]: the peaks given do not match the samples"
            )
    note = ""
    if compute.all():
        note = "; efficiency_bw left at its default: no memory-bound sample"
    elif not compute.any():
        note = "; efficiency_flops left at its default: no compute-bound sample"
    return PerfModel(
        float(1 / u),
        float(1 / v),
        float(o),
        f"calibrated from {len(kept)} {source}{note}",
        efficiency_kv=float(1 / w) if split else None,
    )


def _solve(
    a: np.ndarray,
    k: np.ndarray,
    c: np.ndarray,
    t: np.ndarray,
    compute: np.ndarray,
    held: tuple[float, float, float],
) -> tuple[float, float, float, float, bool]:
    """(u, w, v, o, split) of the least relative squares with each sample on its bound
    `compute` (else memory). The cache's coefficient w is fitted apart (`split`) when the
    memory-bound samples tell it from u, else it is u; a bound no sample sits on keeps
    its coefficients (`held`), and an overhead fitted below 0 is refitted at 0."""
    memory = ~compute
    columns = {
        0: np.where(memory, a, 0.0),
        1: np.where(memory, k, 0.0),
        2: np.where(compute, c, 0.0),
        3: np.ones_like(t),
    }
    split = columns[1].any() and _rank([columns[0] / t, columns[1] / t]) == 2
    if not split:  # one coefficient for all the bytes
        columns[0], columns[1] = columns[0] + columns[1], np.zeros_like(t)
    values = dict(enumerate(held))
    free = [i for i in (0, 1, 2) if columns[i].any()]
    rest = t - sum(values[i] * columns[i] for i in (0, 1, 2) if i not in free)
    for use in ([*free, 3], free):
        fitted = _lstsq([columns[i] / t for i in use], rest / t)
        values = {
            **dict(enumerate(held)),
            3: 0.0,
            **dict(zip(use, map(float, fitted), strict=True)),
        }
        if values[3] >= 0:
            break
    w = values[1] if split else values[0]
    return values[0], w, values[2], values[3], bool(split)


def _rank(columns: list[np.ndarray]) -> int:
    return int(np.linalg.matrix_rank(np.stack(columns, axis=1)))


def _lstsq(columns: list[np.ndarray], target: np.ndarray) -> np.ndarray:
    matrix = np.stack(columns, axis=1)
    if np.linalg.matrix_rank(matrix) < matrix.shape[1]:
        raise UsageError(
            "calibration is degenerate: the samples do not tell bandwidth, compute and "
            "overhead apart (vary the context, batch or shape)"
        )
    return np.linalg.lstsq(matrix, target, rcond=None)[0]


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
        roof = predict(s.bytes, s.flops, bandwidth, peak, model, kv_bytes=s.kv_bytes)
        rows.append(CheckRow(s, roof.time_s, roof.bound))
    return rows


def median_abs_error(rows: Sequence[CheckRow]) -> float:
    """The median of |relative error| over `rows`."""
    if not rows:
        raise ValueError("no rows to take the median error of")
    return median(abs(r.rel_error) for r in rows)


#: The fields of a calibration file, and whether each must be given.
MODEL_FIELDS = {
    "efficiency_bw": True,
    "efficiency_kv": False,
    "efficiency_flops": True,
    "overhead_s": True,
    "source": False,
}


def model_dict(model: PerfModel) -> dict[str, Any]:
    """A model as a calibration file holds it (load_model reads it back)."""
    return {name: getattr(model, name) for name in MODEL_FIELDS}


def load_model(path_or_dict: str | Path | Mapping[str, Any]) -> PerfModel:
    """A PerfModel from a calibration file (JSON) or its mapping, every field checked:
    FieldError naming a bad field and its value, UsageError for a missing or unknown one."""
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
    unknown = [k for k in doc if k not in MODEL_FIELDS]
    if unknown:
        raise UsageError(
            f"{where}: unknown field {unknown[0]!r}{closest(unknown[0], MODEL_FIELDS)}"
        )
    missing = [k for k, required in MODEL_FIELDS.items() if required and k not in doc]
    if missing:
        raise UsageError(f"{where}: missing field {missing[0]}")
    source = doc.get("source", f"loaded from {where}")
    if not isinstance(source, str):
        raise FieldError("source", source, "must be text")
    return PerfModel(
        doc["efficiency_bw"],
        doc["efficiency_flops"],
        doc["overhead_s"],
        source,
        efficiency_kv=doc.get("efficiency_kv"),
    )
