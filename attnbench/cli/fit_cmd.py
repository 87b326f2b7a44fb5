"""`attnbench fit`: how many sequences of what length fit on the given GPUs."""

from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from ..errors import UsageError
from ..experiments.fit import (
    DEFAULT_RESERVE,
    CapacityError,
    FitPlan,
    FitRecord,
    largest_batch,
    longest_context,
)
from ..measure.environment import collect_environment
from ..model.capacity import DEFAULT_SCALE_DTYPE, KvFormat, layer_windows
from ..model.units import parse_memory, parse_share
from ..study.output import format_bytes
from ..study.sweep import load_model
from . import app
from .common import (
    CsvOpt,
    HfConfigOpt,
    JsonOpt,
    ModelOpt,
    QuietOpt,
    console,
    fail,
    handles_errors,
    model_refs,
    parse_int,
    write_outputs,
)
from .kvmem_cmd import none_as_zero

BAR_WIDTH = 60
#: (label, record field, bar character, style) of each part of a GPU's memory.
SEGMENTS = (
    ("weights", "weights_bytes_per_gpu", "█", "blue"),
    ("KV cache", "kv_bytes_per_gpu", "▓", "green"),
    ("reserve", "reserve_bytes_per_gpu", "▒", "yellow"),
    ("free", "free_bytes_per_gpu", "░", "dim"),
)


def memory_bar(record: FitRecord, width: int = BAR_WIDTH) -> Text:
    """One GPU's memory as a horizontal bar, each part's width in proportion (largest
    remainders get the leftover cells, so the widths add up to `width`)."""
    total = record.memory_bytes_per_gpu
    sizes = [getattr(record, field) for _, field, _, _ in SEGMENTS]
    cells = [size * width // total for size in sizes]
    order = sorted(range(len(sizes)), key=lambda i: -(sizes[i] * width % total))
    for i in order[: width - sum(cells)]:
        cells[i] += 1
    bar = Text("[")
    for (_, _, char, style), n in zip(SEGMENTS, cells, strict=True):
        bar.append(char * n, style=style)
    bar.append("]  ")
    bar.append("  ".join(f"{char} {label}" for label, _, char, _ in SEGMENTS))
    return bar


def breakdown_table(record: FitRecord, reserve_text: str) -> Table:
    """Weights, KV cache, reserve and free memory of one GPU, exact and in binary units."""
    total = record.memory_bytes_per_gpu
    seqs = f"{record.batch_per_replica:,} seq"
    tokens = "full windows" if record.context_unbounded else f"{record.seq_len:,} tokens"
    if record.windowed_layers:
        tokens += (f" ({record.windowed_layers} of {record.num_layers} layers keep "
                   f"{record.sliding_window:,})")  # fmt: skip
    notes = {
        "weights": f"{record.weights_dtype}, 1/{record.tp} of the model"
        if record.tp > 1 else record.weights_dtype,
        "KV cache": f"{record.kv_dtype}, {seqs} x {tokens}",
        "reserve": f"--reserve {reserve_text}",
        "free": "unused",
    }  # fmt: skip
    table = Table(title=f"Memory of one GPU ({format_bytes(total)})", title_justify="left")
    for header in ("Part", "size", "bytes", "share", "Note"):
        table.add_column(header, justify="right" if header[0].islower() else "left")
    for label, field, _, _ in SEGMENTS:
        size = getattr(record, field)
        table.add_row(label, format_bytes(size), f"{size:,}", f"{size / total:.1%}", notes[label])
    table.add_row("total", format_bytes(total), f"{total:,}", "100.0%", "")
    return table


def answer_line(record: FitRecord) -> str:
    """The answer in one sentence."""
    per_replica = (f"; {record.batch_per_replica:,} sequences on each of {record.replicas} "
                   "replicas" if record.replicas > 1 else "")  # fmt: skip
    if record.question == "largest_batch":
        return (f"Largest batch at {record.seq_len:,} tokens: {record.batch:,} "
                f"sequences{per_replica}")  # fmt: skip
    head = f"Longest context at batch {record.batch:,}"
    if record.context_unbounded:
        return (f"{head}: unbounded (every layer keeps at most its sliding window, and full "
                f"windows fit){per_replica}")  # fmt: skip
    line = f"{head}: {record.seq_len:,} tokens{per_replica}"
    limit = record.max_position_embeddings
    if limit and record.seq_len and record.seq_len > limit:
        line += f" (more than the model's {limit:,} positions)"
    return line


@app.command("fit")
@handles_errors
def fit_command(
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    memory: str = typer.Option(
        None, "--memory", help="Memory of each GPU: 80GiB, 80GB (= 80e9 bytes), 1.5TiB."
    ),
    gpus: str = typer.Option(None, "--gpus", help="GPUs in all (default: --tp, else 1)."),
    tp: str = typer.Option(None, "--tp", help="Tensor-parallel ranks (default: --gpus)."),
    weights_dtype: str = typer.Option(
        None, "--weights-dtype", help="Weights' dtype (default: the model's)."
    ),
    kv_dtype: str = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: the model's)."),
    kv_scale_group: str = typer.Option(
        None, "--kv-scale-group", help="Elements per scale of a quantised cache."
    ),
    scale_dtype: str = typer.Option(DEFAULT_SCALE_DTYPE, "--scale-dtype", help="Scales' dtype."),
    sliding_window: str = typer.Option(
        None, "--sliding-window", help="Window of the windowed layers (0: none; default: model's)."
    ),
    page_size: str = typer.Option(None, "--page-size", help="Paged blocks of this many tokens."),
    reserve: str = typer.Option(
        DEFAULT_RESERVE, "--reserve", help="Per GPU, for activations and runtime: 10% or 4GiB."
    ),
    seq_len: str = typer.Option(None, "--seq-len", help="Context: report the largest batch."),
    batch: str = typer.Option(None, "--batch", help="Batch: report the longest context."),
    csv: CsvOpt = None,
    json: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """The largest batch at a context length (--seq-len), or the longest context at a batch
    size (--batch), that fits beside the weights and a reserve; exits 1 when nothing fits."""
    refs = model_refs(model, hf_config)
    if refs is None:
        raise UsageError("--model or --hf-config: give the model to fit")
    if memory is None:
        raise UsageError("--memory: give the memory of each GPU, e.g. --memory 80GiB")
    if (seq_len is None) == (batch is None):
        raise UsageError("--seq-len or --batch: give exactly one")
    spec = load_model(refs[0], field_name="--model")
    size = parse_memory(memory, "--memory")
    n_gpus, n_tp = parse_int("--gpus", gpus), parse_int("--tp", tp)
    n_tp = n_tp or n_gpus or 1
    window = parse_int("--sliding-window", none_as_zero(sliding_window), minimum=0)
    plan = FitPlan(
        spec=spec,
        memory_bytes=size.bytes,
        gpus=n_gpus or n_tp,
        tp=n_tp,
        weights_dtype=weights_dtype or spec.dtype,
        kv=KvFormat(
            kv_dtype or spec.dtype, parse_int("--kv-scale-group", kv_scale_group), scale_dtype
        ),  # fmt: skip
        windows=layer_windows(spec.num_layers, spec.windows, window),
        page_size=parse_int("--page-size", page_size),
        reserve_bytes=parse_share(reserve, "--reserve", size.bytes),
    )
    try:
        if seq_len is not None:
            record = largest_batch(plan, parse_int("--seq-len", seq_len))  # type: ignore[arg-type]
        else:
            record = longest_context(plan, parse_int("--batch", batch))  # type: ignore[arg-type]
    except CapacityError as exc:
        raise fail(f"{spec.name}: {exc}", exc.exit_code) from None
    if not quiet:
        if size.decimal:
            console.print(f"note: {size.describe()}", highlight=False)
        console.print(
            f"{spec.name}: {plan.gpus} GPU(s) x {format_bytes(size.bytes)}, --tp {plan.tp}, "
            f"{plan.replicas} replica(s); KV cache per sequence per GPU "
            f"{format_bytes(record.kv_bytes_per_sequence_per_gpu)}",
            highlight=False,
        )
        console.print(answer_line(record), highlight=False)
        console.print(breakdown_table(record, reserve))
        console.print(memory_bar(record))
    config = {
        "model": spec.name, "memory": memory, "gpus": plan.gpus, "tp": plan.tp,
        "weights_dtype": plan.weights_dtype, "kv_dtype": plan.kv.dtype,
        "kv_scale_group": plan.kv.scale_group, "scale_dtype": plan.kv.scale_dtype,
        "sliding_window": window, "page_size": plan.page_size, "reserve": reserve,
        "seq_len": seq_len, "batch": batch,
    }  # fmt: skip
    write_outputs("fit", [record], config, collect_environment(), csv, json, quiet)
