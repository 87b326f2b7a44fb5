"""`attnbench fit`: how many sequences of what length fit on the given GPUs."""

from __future__ import annotations

import typer

from ..experiments.fit import OK, CapacityError, FitPoint, FitRecord, memory_of
from ..model.units import format_bytes
from ..model.what_if import is_what_if
from ..records import as_dict
from ..render.fit import (
    LATENCY,
    answer_labels,
    answer_line,
    breakdown_table,
    latency_answer,
    latency_summary,
    memory_bar,
    state_text,
    targets_line,
)
from ..render.what_if import fit_columns, fit_notes, what_if_set
from .common import (
    NOTE,
    console,
    fail,
    model_notes,
    print_items,
    run_section,
    section_command,
    served_notes,
    show_table,
    show_written,
)
from .group import app
from .options import ConfigOpt, CsvOpt, HfConfigOpt, JsonOpt, ModelOpt, QuietOpt, WideOpt

#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 60
SHORT_HELP = {"fit": "The largest batch or longest context that fits in memory"}


def memory_note(record: FitRecord, point: FitPoint) -> str:
    """What a GPU's memory in decimal units is in bytes ('' in binary units)."""
    size = memory_of(point)
    if not size.decimal:
        return ""
    whose = "" if point.memory is not None else f"{record.gpu}: "
    return f"{whose}{size.describe()}"


def show_answer(record: FitRecord, point: FitPoint, label: str = "") -> None:
    """One answer's memory: in a sentence, as one GPU's table and as a bar, after a blank
    line and `label` (what tells it from the other answers, when there are several)."""
    head = label if label.startswith(record.model) else record.model
    if label and head != label:
        head = f"{record.model} ({label})"
    console.print()
    console.print(
        f"{head}: {record.gpus} GPU(s) x "
        f"{format_bytes(record.memory_bytes_per_gpu)}, --tp {record.tp}, "
        f"{record.replicas} replica(s){', --dp-attention' if record.attention else ''}; "
        "KV cache per sequence per GPU "
        f"{format_bytes(record.kv_bytes_per_sequence_per_gpu)}{state_text(record)}",
        markup=False,
    )
    console.print(breakdown_table(record, f"--reserve {point.reserve}"))
    console.print(memory_bar(record))


def show_latency(records: list[FitRecord], wide: bool) -> None:
    """The answers under latency targets, a line each; the targets and the model they
    are predicted by; then one row per point (per tensor-parallel degree)."""
    for record, label in zip(records, answer_labels(records), strict=True):
        console.print(latency_answer(record, label), markup=False)
    console.print(targets_line(records), markup=False)
    for line in latency_summary(records):
        console.print(line, markup=False)
    show_table("Largest batch within the targets", records, LATENCY, wide)


def show_answers(plan, records: list[FitRecord], wide: bool) -> None:
    """The answers first, a line each (with what tells them apart when there are several:
    the KV cache's dtype, the model, ...), the notes on the GPUs' memory once each, then
    each answer's memory as a table and a bar, and the table of each what-if set."""
    rows = [as_dict(r) for r in records]
    own = [
        (task.point, record)
        for task, record in zip(plan.tasks, records, strict=True)
        if not is_what_if(record.num_kv_heads, record.published_kv_heads)
    ]
    labels = answer_labels([record for _, record in own])
    for (_, record), label in zip(own, labels, strict=True):
        if record.status == OK:
            console.print(answer_line(record) + (f" ({label})" if label else ""), markup=False)
        else:
            console.print(f"{record.model} ({record.variant}): {record.status}", markup=False)
    notes = dict.fromkeys(memory_note(record, point) for point, record in own)
    print_items([note for note in notes if note], bullet=NOTE)
    for (point, record), label in zip(own, labels, strict=True):
        if record.status == OK:
            show_answer(record, point, label)
        variants = what_if_set(rows, as_dict(record))
        if variants:
            columns = fit_columns(record.question, variants)
            show_table("Per KV-head count", variants, columns, wide, hint=None)
            print_items(fit_notes(variants), bullet=NOTE)


@section_command(app, "fit", before=("model", "hf_config", "config"))
def fit_command(
    overrides,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    config: ConfigOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    wide: WideOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The largest batch at a context length (--seq-len), or the longest context at a batch
    size (--batch), that fits beside the weights and a reserve; with --gpu and --tpot (or
    --ttft), the largest batch whose predicted times also meet the targets. Exits 1 when
    any point does not fit or meets no target, after showing and writing every point."""
    from ..study.runner import write_section

    outputs = {"csv": csv, "json": json}
    plan, result, _ = run_section("fit", config, overrides, model, hf_config, outputs, False)
    records: list[FitRecord] = result.records["fit"]
    if len(records) == 1 and records[0].status != OK:
        raise fail(f"{model or hf_config}: {records[0].status}", CapacityError.exit_code)
    if not quiet:
        if any(r.perf_model is not None for r in records):
            show_latency(records, wide)
        else:
            show_answers(plan, records, wide)
        asked = [r.seq_len for r in records if r.question == "largest_batch" and r.seq_len]
        section = plan.sections["fit"]
        model_notes(section.models, asked)
        unset = [name for name in ("weights_dtype", "kv_dtype") if not section.origins.get(name)]
        if unset:
            served_notes(section.models, "planned", unset)
    show_written(write_section("fit", plan, result, csv, json), quiet)  # once all is shown
    if any(r.status != OK for r in records):
        raise typer.Exit(CapacityError.exit_code)
