"""`attnbench fit`: how many sequences of what length fit on the given GPUs."""

from __future__ import annotations

import typer

from ..experiments.fit import OK, CapacityError, FitPoint, FitRecord, memory_of
from ..model.units import format_bytes
from ..model.what_if import is_what_if
from ..records import as_dict
from ..render.fit import (
    LATENCY,
    answer_line,
    breakdown_table,
    latency_summary,
    memory_bar,
    state_text,
    targets_line,
)
from ..render.what_if import fit_columns, fit_notes, what_if_set
from . import app
from .common import (
    CONFIG,
    HF_CONFIG,
    MODEL,
    OUTPUTS,
    console,
    fail,
    model_notes,
    run_section,
    show_table,
    write_outputs,
)
from .flags import section_command


def show_answer(record: FitRecord, point: FitPoint) -> None:
    """The answer in a sentence, one GPU's memory as a table and as a bar."""
    size = memory_of(point)
    if size.decimal:
        whose = "" if point.memory is not None else f"{record.gpu}: "
        console.print(f"note: {whose}{size.describe()}", markup=False)
    console.print(
        f"{record.model}: {record.gpus} GPU(s) x {format_bytes(size.bytes)}, --tp "
        f"{record.tp}, {record.replicas} replica(s); KV cache per sequence per GPU "
        f"{format_bytes(record.kv_bytes_per_sequence_per_gpu)}{state_text(record)}",
        markup=False,
    )
    console.print(answer_line(record), markup=False)
    console.print(breakdown_table(record, f"--reserve {point.reserve}"))
    console.print(memory_bar(record))


def show_latency(records: list[FitRecord], wide: bool) -> None:
    """The answers under latency targets: the targets and the model they are predicted
    by, then one row per point (per tensor-parallel degree)."""
    console.print(targets_line(records), markup=False)
    for line in latency_summary(records):
        console.print(line, markup=False)
    show_table("Largest batch within the targets", records, LATENCY, wide)


def show_answers(plan, records: list[FitRecord], wide: bool) -> None:
    """Each answer in a sentence with one GPU's memory, and the table of each what-if set."""
    rows = [as_dict(r) for r in records]
    for task, record in zip(plan.tasks, records, strict=True):
        if is_what_if(record.num_kv_heads, record.published_kv_heads):
            continue  # in the table of its set, below
        if record.status == OK:
            show_answer(record, task.point)
        else:
            console.print(f"{record.model} ({record.variant}): {record.status}", markup=False)
        variants = what_if_set(rows, as_dict(record))
        if variants:
            columns = fit_columns(record.question, variants)
            show_table("Per KV-head count", variants, columns, wide, hint=None)
            for line in fit_notes(variants):
                console.print(f"note: {line}", markup=False)


@section_command(app, "fit", "fit", before=[MODEL, HF_CONFIG, CONFIG], after=OUTPUTS)
def fit_command(overrides, model, hf_config, config, csv, json, wide, quiet) -> None:
    """The largest batch at a context length (--seq-len), or the longest context at a batch
    size (--batch), that fits beside the weights and a reserve; with --gpu and --tpot (or
    --ttft), the largest batch whose predicted times also meet the targets. Exits 1 when
    nothing fits or no batch meets them."""
    plan, result = run_section(
        "fit",
        "fit",
        config,
        overrides,
        model,
        hf_config,
        {"csv": csv, "json": json},
    )
    records: list[FitRecord] = result.records["fit"]
    if len(records) == 1 and records[0].status != OK:
        raise fail(f"{model or hf_config}: {records[0].status}", CapacityError.exit_code)
    if not quiet:
        if any(r.perf_model is not None for r in records):
            show_latency(records, wide)
        else:
            show_answers(plan, records, wide)
        model_notes(plan.sections["fit"].models)
    config_doc = plan.sections["fit"].to_dict()
    write_outputs("fit", records, FitRecord, config_doc, result.environment, csv, json, quiet)
    if any(r.status != OK for r in records):
        raise typer.Exit(CapacityError.exit_code)
