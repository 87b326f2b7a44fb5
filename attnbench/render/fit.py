"""How `attnbench fit` shows its answer: one sentence, a table of one GPU's memory, and a
bar of it; under latency targets, a table of one row per point (per tensor-parallel
degree) with the batch, the memory's batch and the predicted times."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text

from ..experiments.fit import OK, TOO_SLOW, FitRecord
from ..model.parallelism import attention_split
from ..model.units import format_bytes
from .columns import fmt_4sig, fmt_int, fmt_plain, fmt_rate, fmt_status, variant_cell
from .table import Column

BAR_WIDTH = 60
#: (label, record field, bar character, style) of each part of a GPU's memory.
SEGMENTS = (
    ("weights", "weights_bytes_per_gpu", "█", "blue"),
    ("KV cache", "kv_bytes_per_gpu", "▓", "green"),
    ("state", "state_bytes_per_gpu", "▚", "cyan"),
    ("reserve", "reserve_bytes_per_gpu", "▒", "yellow"),
    ("free", "free_bytes_per_gpu", "░", "dim"),
)


def segments(record: FitRecord) -> tuple[tuple[str, str, str, str], ...]:
    """The parts of a GPU's memory the record has: the state only for a hybrid model."""
    has_state = record.state_bytes_per_sequence_per_gpu > 0
    return tuple(s for s in SEGMENTS if s[0] != "state" or has_state)


def memory_bar(record: FitRecord, width: int = BAR_WIDTH) -> Text:
    """One GPU's memory as a horizontal bar, each part's width in proportion (largest
    remainders get the leftover cells, so the widths add up to `width`), and a legend
    below it."""
    total = record.memory_bytes_per_gpu
    parts = segments(record)
    sizes = [getattr(record, field) for _, field, _, _ in parts]
    cells = [size * width // total for size in sizes]
    order = sorted(range(len(sizes)), key=lambda i: -(sizes[i] * width % total))
    for i in order[: width - sum(cells)]:
        cells[i] += 1
    bar = Text("[")
    for (_, _, char, style), n in zip(parts, cells, strict=True):
        bar.append(char * n, style=style)
    bar.append("]\n")  # the legend on a line of its own: bar and legend pass 80 columns
    bar.append("  ".join(f"{char} {label}" for label, _, char, _ in parts))
    return bar


def state_text(record: FitRecord) -> str:
    """', and state ...' for a hybrid model's state per sequence; '' without one."""
    state = record.state_bytes_per_sequence_per_gpu
    return f", and state {format_bytes(state)} whatever the context" if state else ""


def breakdown_table(record: FitRecord, reserve_text: str) -> Table:
    """Weights, KV cache, reserve and free memory of one GPU, exact and in binary units."""
    total = record.memory_bytes_per_gpu
    # data-parallel attention: a GPU caches its own share of the replica's sequences
    own = bool(record.attention)
    per_gpu, _ = attention_split(record.batch_per_replica, record.tp, own)
    seqs = f"{per_gpu:,} seq"
    tokens = "full windows" if record.context_unbounded else f"{record.seq_len:,} tokens"
    if record.windowed_layers:
        tokens += (
            f" ({record.windowed_layers} of {record.num_layers} layers keep "
            f"{record.sliding_window:,})"
        )
    share = f"1/{record.tp} of the model"
    if record.vocab:  # replicated
        share = f"1/{record.tp} of the layers, the whole vocabulary"
    if own:  # data-parallel: the attention and the embeddings whole on every GPU
        whole = "vocabulary" if record.vocab else "embeddings"
        share = f"1/{record.tp} of the rest, the whole attention and {whole}"
    weights = record.weights or record.weights_dtype
    notes = {
        "weights": f"{weights}, {share}" if record.tp > 1 else weights,
        "KV cache": f"{record.kv_dtype}, {seqs} x {tokens}",
        "state": f"{seqs} x {format_bytes(record.state_bytes_per_sequence_per_gpu)}, "
        "whatever the context",
        "reserve": reserve_text,
        "free": "unused",
    }
    table = Table(title=f"Memory of one GPU ({format_bytes(total)})", title_justify="left")
    for header in ("Part", "size", "bytes", "share", "Note"):
        table.add_column(header, justify="right" if header[0].islower() else "left")
    for label, field, _, _ in segments(record):
        size = getattr(record, field)
        table.add_row(label, format_bytes(size), f"{size:,}", f"{size / total:.1%}", notes[label])
    table.add_row("total", format_bytes(total), f"{total:,}", "100.0%", "")
    return table


def sequences(count: int) -> str:
    """'1 sequence', '54 sequences'."""
    return f"{count:,} sequence{'' if count == 1 else 's'}"


def answer_line(record: FitRecord) -> str:
    """The answer in one sentence; a longest context past the positions the model
    declares (max_position_embeddings) says so (fit_cmd notes a context asked for past
    them, as kvmem does)."""
    per_replica = (
        f"; {sequences(record.batch_per_replica)} on each of {record.replicas} replicas"
        if record.replicas > 1
        else ""
    )
    if record.question == "largest_batch":
        return f"Largest batch at {record.seq_len:,} tokens: {sequences(record.batch)}{per_replica}"
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


def _field(name: str) -> Callable[[FitRecord], Any]:
    return lambda record: getattr(record, name)


#: What may tell one answer of `fit` from another of the same run, how to read it from a
#: record, and how a label says it: the model, the GPU and its memory, the split, the
#: weights and the cache (their formats in words where quantised: the group of int4's,
#: a cache's scales), the cache's layout.
LABELS: tuple[tuple[Callable[[FitRecord], Any], Callable[[Any], str]], ...] = (
    (_field("model"), str),
    (_field("gpu"), str),
    (_field("gpus"), lambda v: f"{v:,} GPUs"),
    (_field("memory_bytes_per_gpu"), lambda v: f"{format_bytes(v)} each"),
    (_field("tp"), lambda v: f"tp {v}"),
    (_field("ep"), lambda v: f"ep {v or 1}"),
    (_field("attention"), lambda v: f"the attention {v or 'split'}"),
    (lambda r: r.weights or r.weights_dtype, lambda v: f"{v} weights"),
    (lambda r: r.kv or r.kv_dtype, lambda v: f"{v} KV cache"),
    (_field("page_size"), lambda v: "no pages" if v is None else f"pages of {v:,} tokens"),
    (_field("sliding_window"), lambda v: "no window" if v is None else f"window {v:,}"),
    (_field("layer_pattern"), lambda v: f"layers {v}"),
)


def answer_labels(records: list[FitRecord]) -> list[str]:
    """Each answer's label: the settings (LABELS) in which the records differ, '' for
    all when there is one record or they differ in none of them ('float8_e4m3fn KV
    cache', 'llama-3-8b, tp 2', 'int4 in groups of 64 weights')."""
    differ = [(value, fmt) for value, fmt in LABELS if len({value(r) for r in records}) > 1]
    return [", ".join(fmt(value(r)) for value, fmt in differ) for r in records]


def latency_answer(record: FitRecord, label: str = "") -> str:
    """The answer under latency targets in one line: the largest batch that meets them
    (and what memory alone would allow, when more), or that none does, or why nothing
    fits; `label` tells it from the others of the run."""
    where = f" at {record.seq_len:,} tokens" + (f" ({label})" if label else "")
    if record.status == OK:
        more = record.memory_batch is not None and record.memory_batch > record.batch
        memory = f", where memory alone allows {record.memory_batch:,}" if more else ""
        return f"Largest batch within the targets{where}: {sequences(record.batch)}{memory}"
    if fmt_status(record.status) == TOO_SLOW:
        return f"No batch meets the targets{where}: {record.status}"
    return f"Nothing fits{where}: {record.status}"


def short_status(status: str | None) -> str:
    """A status in a word or two: 'ok', 'too slow' (no batch meets a target) or 'no fit'
    (memory leaves no batch); the whole of it goes in a note under the table."""
    if status is None or fmt_status(status) in (OK, TOO_SLOW):
        return fmt_status(status)
    return "no fit"


#: The columns of the answers under latency targets: the settings (to the title when
#: every row shares them), then the answer, the batch memory alone allows ('fits'), the
#: predictions and the limit that binds. TTFT shows only when a ttft target was given.
LATENCY: list[Column] = [
    Column("Model", "model", fmt_plain, rank=0, kind="label", setting=True, title_text=str),
    Column("Variant", "variant", fmt_plain, rank=0, kind="label", cell=variant_cell, setting=True),
    Column("GPU", "gpu", fmt_plain, rank=0, kind="label", setting=True, title_text=str),
    Column(
        "GPUs",
        "gpus",
        fmt_int,
        rank=1,
        setting=True,
        title_text=lambda v: f"{v:,} GPU{'s' * (v != 1)}",
    ),
    Column(
        "context", "seq_len", fmt_int, rank=0, setting=True, title_text=lambda v: f"{v:,} tokens"
    ),
    Column("tp", "tp", fmt_int, rank=0),
    # experts split whole over ranks: None (each expert over all tp) reads 1 beside them
    Column("ep", "ep", lambda v: fmt_int(v or 1), rank=0, setting=True),
    Column("attention", "attention", lambda v: v or "split", rank=0, kind="label", setting=True),
    Column("batch", "batch", fmt_int, rank=0),
    Column("fits", "memory_batch", fmt_int, rank=1),
    Column("TPOT ms", "tpot_ms", fmt_4sig, rank=1),
    Column("tok/s/GPU", "tokens_per_s_per_gpu", fmt_rate, rank=2),
    Column("TTFT ms", "ttft_ms", fmt_4sig, rank=2),
    Column("set by", "bound", fmt_plain, rank=1, kind="label"),
    Column("Status", "status", fmt_plain, rank=3, kind="status", compact=short_status),
]


def _duration(ms: float) -> str:
    """A target in ms as it reads best: '50 ms', '2 s', '0.5 ms'."""
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def targets_line(records: list[FitRecord]) -> str:
    """The targets of a latency question, and what each time stands for, in one line:
    'Targets: time per output token <= 50 ms (a decode step of the batch on one
    replica), time to first token <= 2 s (the prefill of one sequence)'."""
    parts = []
    tpots = sorted({r.tpot_target_ms for r in records if r.tpot_target_ms is not None})
    ttfts = sorted({r.ttft_target_ms for r in records if r.ttft_target_ms is not None})
    if tpots:
        shown = ", ".join(map(_duration, tpots))
        parts.append(f"time per output token <= {shown} (a decode step of the batch)")
    if ttfts:
        shown = ", ".join(map(_duration, ttfts))
        parts.append(f"time to first token <= {shown} (the prefill of one sequence)")
    return "Targets: " + "; ".join(parts)


def latency_summary(records: list[FitRecord]) -> list[str]:
    """What the table of a latency question stands on, a line each: the memory of each
    GPU, and the performance model's parameters with their source."""
    memories = sorted({r.memory_bytes_per_gpu for r in records})
    lines = [
        "Memory per GPU: "
        + ", ".join(f"{format_bytes(m)} ({m:,} bytes)" for m in memories)
        + "; predicted by a roofline on the GPU's measured figures (see predict)"
    ]
    for model in dict.fromkeys(r.perf_model for r in records if r.perf_model):
        lines.append(f"Performance model: {model}")
    if any(r.status == OK and r.bound == "latency" for r in records):
        lines.append(
            "latency: a larger batch would fit, but its step would miss the time per output token"
        )
    return lines
