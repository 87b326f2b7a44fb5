"""`attnbench predict`: prefill and decode times on a named GPU or this machine, from the
roofline; its calibration on a measured run, and its check against one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import FieldError, UsageError
from ..model.calibration import (
    CheckReport,
    calibrate_run,
    calibration_dict,
    check_run,
    load_calibration,
)
from ..model.devices import THIS_DEVICE, DeviceSpec, device_spec
from ..model.units import parse_duration
from ..render.predict import (
    CHECK_COLUMNS,
    PHASE_COLUMNS,
    check_rows,
    phase_rows,
    source_lines,
)
from ..study.documents import load_document
from . import app
from .common import (
    CONFIG,
    HF_CONFIG,
    MODEL,
    OUTPUTS,
    console,
    model_notes,
    print_items,
    run_section,
    show_table,
    write_section_outputs,
)
from .flags import option, section_command

CALIBRATE = option(
    "calibrate",
    None,
    "--calibrate",
    help="Fit the efficiencies and the overhead per step to a measured decode-speed or "
    "study results.json, against --gpu's peaks (default: the peaks the run measured), "
    "and write them to --to.",
    metavar="RESULTS.json",
)
CHECK = option(
    "check",
    None,
    "--check",
    help="Print predicted against measured for every timed row of a results.json, with "
    "--calibration's model (default: the stated defaults), and the median error.",
    metavar="RESULTS.json",
)
TO = option(
    "to",
    None,
    "--to",
    help="Where --calibrate writes the calibration (default: beside RESULTS.json, as "
    "RESULTS.calibration.json).",
    metavar="PATH",
)
MIN_TIME = option(
    "min_time",
    None,
    "--min-time",
    help="--calibrate and --check: only the samples measured at this time or more, e.g. "
    "1ms (default: all).",
    metavar="TIME",
)


@section_command(
    app,
    "predict",
    "predict",
    before=[MODEL, HF_CONFIG, CONFIG],
    after=[CALIBRATE, CHECK, TO, MIN_TIME, *OUTPUTS],
)
def predict_command(
    overrides, model, hf_config, config, calibrate, check, to, min_time, csv, json, wide, quiet
) -> None:
    """Time to first token and time per output token of one attention layer and of a
    whole model on a named GPU (its datasheet peaks) or this machine (the peaks it
    measures): the bytes and FLOPs of each, against the device's ridge point."""
    min_time_s = parse_duration(min_time, "min_time") if min_time else 0.0
    if calibrate or check:
        _measured_run_mode(overrides, calibrate, check, to, min_time_s, quiet)
        return
    outputs = {"csv": csv, "json": json}
    plan, result = run_section("predict", "predict", config, overrides, model, hf_config, outputs)
    if not quiet:
        rows = result.section_records("predict")
        show_table("Predicted", phase_rows(rows), PHASE_COLUMNS, wide)
        print_items(source_lines(rows))
        model_notes(plan.sections["predict"].models, [r["seq_len"] for r in rows])
    write_section_outputs("predict", "predict", plan, result, csv, json, quiet)


def _measured_run_mode(
    overrides: dict[str, Any],
    calibrate: str | None,
    check: str | None,
    to: str | None,
    min_time_s: float,
    quiet: bool,
) -> None:
    """--calibrate (then its fit checked on its own samples) or --check."""
    if calibrate and check:
        raise UsageError("--calibrate and --check: give one, then check with the file it wrote")
    device = _named_device(overrides.get("gpu"))
    if calibrate:
        doc = _results(calibrate, "calibrate")
        calibration = calibrate_run(doc, device, Path(calibrate).name, min_time_s)
        path = Path(to) if to else Path(calibrate).with_suffix(".calibration.json")
        try:
            path.write_text(json.dumps(calibration_dict(calibration), indent=2) + "\n")
        except OSError as exc:
            raise FieldError("to", str(path), f"cannot write: {exc.strerror}") from None
        report = check_run(doc, calibration, None, min_time_s)
        if not quiet:
            _show_check(report, f"Calibrated on {calibrate}")
            console.print(f"wrote {path}", markup=False)
        return
    given = overrides.get("calibration")
    calibration = load_calibration(given) if given else None
    report = check_run(_results(check, "check"), calibration, device, min_time_s)
    if not quiet:
        _show_check(report, f"Checked against {check}")


def _named_device(gpus: list[str] | None) -> DeviceSpec | None:
    """The one named GPU of --gpu, or None for this machine (the peaks the run measured)."""
    if not gpus:
        return None
    if len(gpus) > 1:
        raise FieldError("gpu", ",".join(gpus), "give one GPU with --calibrate and --check")
    return None if gpus[0] == THIS_DEVICE else device_spec(gpus[0])


def _results(path: str, field: str) -> dict:
    document = load_document(path)
    if document.raw is None:
        raise FieldError(field, path, "needs the JSON of a run (--json, or results.json)")
    return document.raw


def _show_check(report: CheckReport, title: str) -> None:
    rows = check_rows(report.rows)
    show_table(title, rows, CHECK_COLUMNS, wide=False, hint=None)
    worst = report.worst
    floor = f" of {report.min_time_s * 1e3:g} ms or more" if report.min_time_s else ""
    print_items(
        [
            f"median |error| {report.median_abs_error:.1%} over {len(report.rows)} "
            f"samples{floor}; worst {worst.rel_error:+.1%} ({worst.sample.label})",
            f"peaks: {report.device.title}: "
            f"{report.device.memory_bandwidth / 1e9:,.1f} GB/s; {'; '.join(report.device.sources)}",
            f"model: {report.model.describe()}",
        ]
    )
