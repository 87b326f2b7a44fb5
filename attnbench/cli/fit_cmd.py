"""`attnbench fit`: how many sequences of what length fit on the given GPUs."""

from __future__ import annotations

from ..experiments.fit import CapacityError, FitRecord
from ..model.units import format_bytes, parse_memory
from ..render.fit import answer_line, breakdown_table, memory_bar
from . import app
from .common import (
    CONFIG,
    CSV,
    HF_CONFIG,
    JSON,
    MODEL,
    QUIET,
    console,
    fail,
    model_notes,
    run_section,
    write_outputs,
)
from .flags import section_command


@section_command(app, "fit", "fit", before=[MODEL, HF_CONFIG, CONFIG], after=[CSV, JSON, QUIET])
def fit_command(overrides, model, hf_config, config, csv, json, quiet) -> None:
    """The largest batch at a context length (--seq-len), or the longest context at a batch
    size (--batch), that fits beside the weights and a reserve; exits 1 when nothing fits."""
    try:
        plan, result = run_section(
            "fit",
            "fit",
            config,
            overrides,
            model,
            hf_config,
            {"csv": csv, "json": json},
        )
    except CapacityError as exc:
        raise fail(f"{model or hf_config}: {exc}", exc.exit_code) from None
    records: list[FitRecord] = result.records["fit"]
    if not quiet:
        for task, record in zip(plan.tasks, records, strict=True):
            point = task.point
            size = parse_memory(point.memory, "memory")
            if size.decimal:
                console.print(f"note: {size.describe()}", markup=False)
            console.print(
                f"{record.model}: {record.gpus} GPU(s) x {format_bytes(size.bytes)}, --tp "
                f"{record.tp}, {record.replicas} replica(s); KV cache per sequence per GPU "
                f"{format_bytes(record.kv_bytes_per_sequence_per_gpu)}",
                markup=False,
            )
            console.print(answer_line(record), markup=False)
            console.print(breakdown_table(record, f"--reserve {point.reserve}"))
            console.print(memory_bar(record))
        model_notes(plan.sections["fit"].models)
    config_doc = plan.sections["fit"].to_dict()
    write_outputs("fit", records, FitRecord, config_doc, result.environment, csv, json, quiet)
