"""Calibrating and checking the roofline model on a measured run: the samples of a results
document's decode records, and the fit (model/calibration.py) against the peaks of the
device experiments.target resolves (a named GPU, or this machine as the run measured it).

Samples come from a results document's decode records: the cached step of each timed
point (bytes_per_step, flops_per_step, step_ms_median) and, where it was timed, its
prefill (prefill_flops, prefill_ms_median). A record carries no prefill bytes: they are
counted as one layer's step of S new tokens attending S keys (roofline.layer_counts: the
weights, the prompt's K/V written and read back, and its activations). Points under
tensor parallelism are left out: their step includes the all-reduces, which the
single-device roofline does not see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import FieldError, UsageError, brief, show_value, spelled
from ..model.calibration import (
    PREFILL,
    STEP,
    Calibration,
    CheckReport,
    Sample,
    calibrate,
    calibration_dict,
    check,
    floor_text,
    load_calibration,
    parse_calibration,
    peaks_of,
    usable,
)
from ..model.devices import THIS_DEVICE, DeviceSpec, attention_peaks
from ..model.formulas import attention_core_flops
from ..model.roofline import DEFAULT_MODEL, ModelCounts, layer_counts
from ..model.shapes import AttentionShape, shape_label
from .target import is_this, target_device

#: The largest count (bytes, FLOPs) a sample's record may give: SQLite's INTEGER, and
#: far beyond any step a device runs.
MAX_COUNT = 2**63 - 1


def one_gpu(gpus: Sequence[str] | None) -> str:
    """The GPU a measured run is calibrated or checked against: the one named (several:
    FieldError), else THIS_DEVICE, the peaks the run measured."""
    if gpus and len(gpus) > 1:
        raise FieldError("gpu", ",".join(gpus), "give one GPU to calibrate or check a run against")
    return gpus[0] if gpus else THIS_DEVICE


def calibrate_results(
    doc: Mapping[str, Any], gpu: str | None, name: str, min_time_s: float = 0.0
) -> tuple[Calibration, CheckReport]:
    """The calibration of a results document (`name`: its file) against `gpu`'s peaks
    (THIS_DEVICE or None: the ones the run measured), and its check on its own samples."""
    calibration = calibrate_run(doc, _named(gpu or THIS_DEVICE), name, min_time_s)
    return calibration, check_run(doc, calibration, None, min_time_s, name)


def check_results(
    doc: Mapping[str, Any],
    calibration: str | None,
    gpu: str | None,
    name: str,
    min_time_s: float = 0.0,
) -> CheckReport:
    """A calibration file's model (None: the defaults) checked against every timed sample
    of a results document (`name`: its file), on `gpu`'s peaks (see check_run); `gpu`
    None: the calibration's, else the run's. THIS_DEVICE asked for is the run's own
    peaks, which a calibration fitted against a named GPU's cannot be checked on."""
    loaded = load_calibration(calibration) if calibration else None
    fitted = loaded.device if loaded is not None else None
    if gpu is not None and is_this(gpu) and fitted is not None and not is_this(fitted.name):
        reason = f"was fitted against {peaks_of(fitted.name)}, not {peaks_of(THIS_DEVICE)}"
        raise FieldError("calibration", calibration, reason)
    return check_run(doc, loaded, _named(gpu or THIS_DEVICE), min_time_s, name)


def _named(gpu: str) -> DeviceSpec | None:
    """A named GPU's figures; None for THIS_DEVICE (the peaks the run measured)."""
    return None if is_this(gpu) else target_device(gpu)


#: The fields of a timed record a sample needs, each an integer: the layer's shape and
#: the point's batch and context (a batch spec's longest context may be 0).
SHAPE_FIELDS = {
    "batch": 1,
    "d_model": 1,
    "num_heads": 1,
    "num_kv_heads": 1,
    "head_dim": 1,
    "prompt_len": 0,
}


def samples_from_results(
    doc: Mapping[str, Any], provider: str | None = None, name: str = "results"
) -> list[Sample]:
    """The samples of a results document's decode records (of `provider` alone when given):
    a study's (sections.decode.records) or decode-speed's (its top-level records). A
    record is timed when it holds a step time (only ok and noisy points do). Every timed
    record is checked whole: UsageError naming the file (`name`), the record and the
    field when what a sample needs is missing, out of range or inconsistent."""
    samples = []
    for i, r in enumerate(_decode_records(doc)):
        if r.get("mode") != "cache" or r.get("tp", 1) != 1 or r.get("step_ms_median") is None:
            continue
        if provider is not None and r.get("provider") != provider:
            continue
        where = f"{name}: decode record {i}"
        shape = _checked_shape(r, where)
        samples.append(_step_sample(r, shape, where))
        if r.get("prefill_ms_median") is not None:
            samples.append(_prefill_sample(r, shape, where))
    return samples


def _checked_shape(record: Mapping[str, Any], where: str) -> AttentionShape:
    """The record's layer shape, once its shape, batch, context and dtype are checked."""
    for name, minimum in SHAPE_FIELDS.items():
        _count(record, name, where, minimum, needs="it")
    if not isinstance(record.get("dtype"), str):
        raise UsageError(f"{where}: dtype: {spelled(record.get('dtype'))} is not a dtype's name")
    try:
        return _shape(record)
    except ValueError as exc:  # KV heads that do not divide the query heads
        raise UsageError(f"{where}: {exc}") from None


def _count(
    record: Mapping[str, Any],
    name: str,
    where: str,
    minimum: int = 1,
    needs: str = "its bytes and FLOPs",
) -> int:
    """A count of the record: an integer from `minimum` to MAX_COUNT; missing, an error
    saying what a timed step `needs` it for."""
    value = record.get(name)
    if value is None:
        raise UsageError(f"{where}: {name}: missing (a timed step needs {needs})")
    if not _is_int(value) or not minimum <= value <= MAX_COUNT:
        raise UsageError(
            f"{where}: {name}: {brief(value)} is not an integer from {minimum} to {MAX_COUNT:,}"
        )
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _at_most(where: str, part: tuple[str, int], whole: tuple[str, int]) -> None:
    """UsageError when a part of a count is larger than the count it is part of."""
    if part[1] > whole[1]:
        raise UsageError(
            f"{where}: {whole[0]}: {whole[1]:,} is less than its part, {part[0]} {part[1]:,}"
        )


def _step_sample(record: Mapping[str, Any], shape: AttentionShape, where: str) -> Sample:
    """A record's cached step: its bytes and FLOPs, the cache it read, and its attention
    core's FLOPs (QK^T and PV over the context, for a uniform batch; a batch given
    sequence by sequence counts all its FLOPs as dense)."""
    total = _count(record, "bytes_per_step", where)
    flops = _count(record, "flops_per_step", where, minimum=0)
    kv = _count(record, "kv_bytes_per_gpu", where, 0) if record.get("kv_bytes_per_gpu") else 0
    _at_most(where, ("kv_bytes_per_gpu", kv), ("bytes_per_step", total))
    core = 0
    if record.get("batch_spec") is None:
        keys = record["prompt_len"] + 1
        core = attention_core_flops(shape, record["batch"], 1, keys, causal=True)
        _at_most(where, ("the attention core's FLOPs", core), ("flops_per_step", flops))
    return Sample(
        total,
        flops,
        record["step_ms_median"] * 1e-3,
        record["dtype"],
        STEP,
        kv,
        f"{STEP} {_point(record)}",
        core,
        paged=record.get("block_size") is not None,
        where=where,
    )


def _prefill_sample(record: Mapping[str, Any], shape: AttentionShape, where: str) -> Sample:
    """A record's timed prefill: its FLOPs as measured, its bytes as counted."""
    flops = _count(record, "prefill_flops", where, minimum=0)
    try:
        counts = record_prefill_counts(record)
    except FieldError as exc:  # a dtype the roofline does not know
        raise UsageError(f"{where}: {exc.field}: {show_value(exc.value)}: {exc.reason}") from None
    _at_most(
        where, ("the attention core's FLOPs", counts.attention_flops), ("prefill_flops", flops)
    )
    if counts.bytes > MAX_COUNT:
        raise UsageError(f"{where}: its prefill moves more than {MAX_COUNT:,} bytes")
    return Sample(
        counts.bytes,
        flops,
        record["prefill_ms_median"] * 1e-3,
        record["dtype"],
        PREFILL,
        counts.kv_bytes,
        f"{PREFILL} {_point(record)}",
        counts.attention_flops,
        where=where,
    )


def _shape(record: Mapping[str, Any]) -> AttentionShape:
    return AttentionShape(
        record["d_model"], record["num_heads"], record["num_kv_heads"], record["head_dim"]
    )


def _point(record: Mapping[str, Any]) -> str:
    """A record's point in a few characters: 'd4096 h32/8 b4 s1024 float32', with its
    batch spec in place of batch and context, and 'block 16' for a paged cache."""
    shape = shape_label(record["d_model"], record["num_heads"], record["num_kv_heads"])
    batch = f"b{record['batch']} s{record['prompt_len']}"
    if record.get("batch_spec") is not None:
        batch = str(record["batch_spec"])
    block = f" block {record['block_size']}" if record.get("block_size") is not None else ""
    provider = record.get("provider")
    tail = f" {provider}" if provider and provider != "attnbench" else ""
    return f"{shape} {batch}{block}{tail}"


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


def check_run(
    doc: Mapping[str, Any],
    calibration: Calibration | None,
    device: DeviceSpec | None,
    min_time_s: float = 0.0,
    name: str = "results",
) -> CheckReport:
    """The model of `calibration` (else the defaults) against every timed sample of a
    results document (`name`: its file) measured at `min_time_s` or more (see usable), on
    the peaks of the device the calibration was fitted against, else `device`, else the
    ones the run measured (a calibration of THIS_DEVICE holds the efficiencies, as shares
    of whatever this machine measures at the time: here, the checked run's peaks). A
    `device` other than the calibration's is refused, as a prediction refuses it."""
    samples = usable(samples_from_results(doc, name=name), min_time_s)
    if not samples:
        raise UsageError(
            f"{name}: no timed decode samples{floor_text(min_time_s)} to check against"
        )
    if calibration is not None and calibration.device is not None and device is not None:
        calibration.model_for(device, calibration.path)
    fitted = calibration.device if calibration is not None else None
    if fitted is not None and fitted.name != THIS_DEVICE:
        device = fitted
    device = device or target_device(THIS_DEVICE, doc.get("environment"), name)
    model = calibration.model if calibration is not None else DEFAULT_MODEL
    rows = check(
        samples, device.memory_bandwidth, device.dense_flops, model, attention_peaks(device)
    )
    return CheckReport(rows, model, device, min_time_s)


def calibrate_run(
    doc: Mapping[str, Any],
    device: DeviceSpec | None,
    name: str,
    min_time_s: float = 0.0,
) -> Calibration:
    """The calibration of a results document's timed decode records (`name`: the file, its
    own name the fit's source), against `device`'s peaks, or the peaks the run measured
    when None. The fit is read back as its file would be: UsageError, with the reason,
    for one no file may hold (an overhead above MAX_OVERHEAD_S: no launch cost)."""
    environment = doc.get("environment") or {}
    samples = samples_from_results(doc, name=name)
    device = device or target_device(THIS_DEVICE, environment, name)
    source = Path(name).name
    model = calibrate(
        samples,
        device.memory_bandwidth,
        device.dense_flops,
        min_time_s,
        source,
        attention_peaks(device),
    )
    calibration = Calibration(model, device, environment, name)
    try:
        parse_calibration(calibration_dict(calibration), name)
    except FieldError as exc:
        raise UsageError(
            f"{name}: the fit is refused: {exc.field} {show_value(exc.value)}: {exc.reason}"
        ) from None
    return calibration
