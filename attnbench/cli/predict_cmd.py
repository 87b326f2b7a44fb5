"""`attnbench predict`: prefill and decode times on a named GPU or this machine, from the
roofline; its calibration on a measured run, and its check against one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import FieldError, UsageError
from ..experiments.target import is_this
from ..model.calibration import CheckReport, calibration_dict, floor_text, report_dict
from ..model.units import parse_duration
from ..render.columns import aligned_columns
from ..render.predict import (
    CHECK_COLUMNS,
    PHASE_COLUMNS,
    References,
    batch_prefill_note,
    check_rows,
    device_sources,
    fit_notes,
    generation_note,
    phase_rows,
    source_notes,
)
from ..study.output import write_json_atomic
from .common import (
    BULLET,
    check_writable,
    console,
    model_notes,
    print_items,
    run_section,
    section_command,
    served_notes,
    show_table,
    show_written,
)
from .flags import flag_of
from .group import app
from .options import (
    CalibrateOpt,
    CalibrationToOpt,
    CheckOpt,
    ConfigOpt,
    CsvOpt,
    HfConfigOpt,
    JsonOpt,
    MinTimeOpt,
    ModelOpt,
    QuietOpt,
    WideOpt,
)

#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 70
SHORT_HELP = {"predict": "Prefill and decode times on a named GPU, from a roofline"}


@section_command(app, "predict", before=("model", "hf_config", "config"))
def predict_command(
    overrides,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    config: ConfigOpt = None,
    calibrate: CalibrateOpt = None,
    check: CheckOpt = None,
    to: CalibrationToOpt = None,
    min_time: MinTimeOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    wide: WideOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Time to first token and time per output token of one attention layer and of a
    whole model on a named GPU (what microbenchmarks measured of it) or this machine (the
    peaks it measures): the bytes and FLOPs of each, against the device's ridge point."""
    if calibrate or check:
        given = {"model": model, "hf_config": hf_config, "config": config, "csv": csv}
        _measured_run_mode(overrides, given, calibrate, check, to, min_time, json, wide, quiet)
        return
    for name, value, mode in (
        ("to", to, "--calibrate"),
        ("min_time", min_time, "--calibrate or --check"),
    ):
        if value is not None:
            raise UsageError(f"{flag_of(name)} goes with {mode}, not a prediction")
    outputs = {"csv": csv, "json": json}
    plan, result, written = run_section("predict", config, overrides, model, hf_config, outputs)
    if not quiet:
        rows = result.section_records("predict")
        phases = phase_rows(rows)
        show_table("Predicted", phases, aligned_columns(PHASE_COLUMNS, phases), wide)
        print_items(fit_notes(rows))
        if plan.sections["predict"].origins.get("seq_len") is None:  # the schema's default
            print_items([f"context {rows[0]['seq_len']:,} tokens, the default: --seq-len sets it"])
        references = References()
        print_items(batch_prefill_note(rows) + generation_note(rows))
        for device, figures in device_sources(rows, references):
            print_items([device])
            print_items(figures, bullet=FIGURE_BULLET)
        print_items([references.cite(note) for note in source_notes(rows)])
        section = plan.sections["predict"]
        model_notes(section.models, [r["seq_len"] for r in rows])
        if section.origins.get("dtype") is None and any(not is_this(r["gpu"]) for r in rows):
            served_notes(section.models, "predicted on the named GPUs", ["dtype"])
        _print_references(references)
    show_written(written, quiet)


#: How a device's figure starts, under the device's item.
FIGURE_BULLET = " " * len(BULLET) + "- "


def _print_references(references: References) -> None:
    """The URLs the sources cite, one a line after 'sources:', each whole: printed as soft
    wrap, the terminal folds a long one, never rich, so that it stays one URL to click or
    copy."""
    lines = references.lines()
    if lines:
        console.print("sources:", markup=False, highlight=False)
    for line in lines:
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


#: The flags --calibrate and --check take besides their own: the GPU whose peaks to use,
#: for --check the calibration to check, and a sweep file that may give either.
MEASURED_RUN_FIELDS = {"gpu", "calibration", "config"}


def _measured_run_mode(
    overrides: dict[str, Any],
    given: dict[str, str | None],
    calibrate: str | None,
    check: str | None,
    to: str | None,
    min_time: str | None,
    json_path: str | None,
    wide: bool,
    quiet: bool,
) -> None:
    """--calibrate (then its fit checked on its own samples) or --check; a flag of
    predict's own mode (`given`, `overrides`) is refused, as --to without --calibrate and
    --calibration with it. Nothing is written before the fit and its check are done."""
    from ..experiments.calibrate import calibrate_results, check_results
    from ..study.plan import measured_run_target

    mode = "--calibrate" if calibrate else "--check"
    _refuse_flags(mode, overrides, given, calibrate, check, to)
    min_time_s = parse_duration(min_time, "min_time", zero=True) if min_time else 0.0
    gpu, calibration_path = measured_run_target(given["config"], overrides)
    path = (
        (Path(to) if to else Path(calibrate).with_suffix(".calibration.json"))
        if calibrate
        else None
    )
    inputs = {"calibrate": calibrate, "check": check, "calibration": calibration_path}
    check_writable({"to": str(path) if path else None, "json": json_path}, inputs)
    results = calibrate or check
    doc = _results(results, "calibrate" if calibrate else "check")
    if calibrate:
        calibration, report = calibrate_results(doc, gpu, calibrate, min_time_s)
        _write("to", path, calibration_dict(calibration))
    else:
        report = check_results(doc, calibration_path, gpu, results, min_time_s)
    if json_path:
        _write("json", json_path, report_dict(report, results))
    if not quiet:
        verb = "Calibrated on" if calibrate else "Checked against"
        _show_check(report, f"{verb} {results}", wide)
        for written in (path, json_path):
            if written:
                console.print(f"wrote {written}", markup=False)


def _refuse_flags(
    mode: str,
    overrides: dict[str, Any],
    given: dict[str, str | None],
    calibrate: str | None,
    check: str | None,
    to: str | None,
) -> None:
    """A flag that does nothing with --calibrate or --check: an error naming both."""
    if calibrate and check:
        raise UsageError("--calibrate and --check: give one, then check with the file it wrote")
    if to is not None and not calibrate:
        raise UsageError(
            "--to goes with --calibrate (where it writes the calibration), not --check"
        )
    if calibrate and overrides.get("calibration") is not None:
        raise UsageError(
            "--calibration with --calibrate: a calibration is fitted, not read; "
            "check it with --check RESULTS --calibration FILE"
        )
    names = [n for n, v in {**given, **overrides}.items() if v is not None]
    ignored = [n for n in names if n not in MEASURED_RUN_FIELDS]
    if ignored:
        raise UsageError(
            f"{flag_of(ignored[0])} with {mode}: it predicts no point of its own; it reads "
            "every timed row of the results (give --gpu, --calibration, --min-time, --json)"
        )


def _write(field: str, path: str | Path, document: dict) -> None:
    """Write `document` as JSON to `path` (the file of flag `field`), whole or not at all."""
    try:
        write_json_atomic(path, document)
    except ValueError:  # NaN or infinity, refused before the file is replaced
        reason = "not written: it would hold NaN or an infinity, which JSON cannot"
        raise FieldError(field, str(path), reason) from None
    except OSError as exc:
        raise FieldError(field, str(path), f"cannot write: {exc.strerror}") from None


def _results(path: str, field: str) -> dict:
    from ..study.documents import load_document

    document = load_document(path)
    if document.raw is None:
        raise FieldError(field, path, "needs the JSON of a run (--json, or results.json)")
    return document.raw


def _show_check(report: CheckReport, title: str, wide: bool) -> None:
    rows = check_rows(report.rows)
    show_table(title, rows, aligned_columns(CHECK_COLUMNS, rows), wide=wide, hint=None)
    worst = report.worst
    floor = floor_text(report.min_time_s)
    references = References()
    sources = ", ".join(references.cite(source) for source in report.device.sources)
    peaks = f"{report.device.memory_bandwidth / 1e9:,.1f} GB/s; {sources}"
    print_items(
        [
            f"median |error| {report.median_abs_error:.1%} over {len(report.rows)} "
            f"samples{floor}; worst {worst.rel_error:+.1%} ({worst.sample.label})",
            f"peaks: {report.device.title}: {peaks}",
            f"model: {report.model.describe()}",
        ]
    )
    _print_references(references)
