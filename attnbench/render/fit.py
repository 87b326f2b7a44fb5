"""How `attnbench fit` shows its answer: one sentence, a table of one GPU's memory, and a
bar of it."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..experiments.fit import FitRecord
from ..model.units import format_bytes

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
    remainders get the leftover cells, so the widths add up to `width`), and a legend
    below it."""
    total = record.memory_bytes_per_gpu
    sizes = [getattr(record, field) for _, field, _, _ in SEGMENTS]
    cells = [size * width // total for size in sizes]
    order = sorted(range(len(sizes)), key=lambda i: -(sizes[i] * width % total))
    for i in order[: width - sum(cells)]:
        cells[i] += 1
    bar = Text("[")
    for (_, _, char, style), n in zip(SEGMENTS, cells, strict=True):
        bar.append(char * n, style=style)
    bar.append("]\n")  # the legend on a line of its own: bar and legend pass 80 columns
    bar.append("  ".join(f"{char} {label}" for label, _, char, _ in SEGMENTS))
    return bar


def breakdown_table(record: FitRecord, reserve_text: str) -> Table:
    """Weights, KV cache, reserve and free memory of one GPU, exact and in binary units."""
    total = record.memory_bytes_per_gpu
    seqs = f"{record.batch_per_replica:,} seq"
    tokens = "full windows" if record.context_unbounded else f"{record.seq_len:,} tokens"
    if record.windowed_layers:
        tokens += (
            f" ({record.windowed_layers} of {record.num_layers} layers keep "
            f"{record.sliding_window:,})"
        )
    notes = {
        "weights": f"{record.weights_dtype}, 1/{record.tp} of the model"
        if record.tp > 1
        else record.weights_dtype,
        "KV cache": f"{record.kv_dtype}, {seqs} x {tokens}",
        "reserve": reserve_text,
        "free": "unused",
    }
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
    per_replica = (
        f"; {record.batch_per_replica:,} sequences on each of {record.replicas} replicas"
        if record.replicas > 1
        else ""
    )
    if record.question == "largest_batch":
        return (
            f"Largest batch at {record.seq_len:,} tokens: {record.batch:,} sequences{per_replica}"
        )
    head = f"Longest context at batch {record.batch:,}"
    if record.context_unbounded:
        return (
            f"{head}: unbounded (every layer keeps at most its sliding window, and full "
            f"windows fit){per_replica}"
        )
    line = f"{head}: {record.seq_len:,} tokens{per_replica}"
    limit = record.max_position_embeddings
    if limit and record.seq_len and record.seq_len > limit:
        line += f" (more than the model's {limit:,} positions)"
    return line
