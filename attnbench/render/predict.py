"""How `attnbench predict` shows its predictions: one row per part (a layer, the model) and
phase (prefill, decode step) of each point, the sources of every figure below, and the
check of a calibration against a measured run."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..model.calibration import CheckRow
from ..model.devices import LOAD_LATENCY, THIS_DEVICE, peak_name
from ..model.roofline import STATE_FLOPS, WEIGHT_ONLY_TILE
from ..model.units import format_bytes
from ..model.weights import KEPT_ATTENTION, ON_TENSOR_CORES, QUANTIZED_HEAD, WeightFormat
from .columns import (
    fmt_4sig,
    fmt_int,
    fmt_plain,
    fmt_rate,
    fmt_si,
    variant_cell,
)
from .table import Column


def gpu_name(gpu: object) -> str:
    """A GPU as a prediction names it: THIS_DEVICE is this machine, its peaks measured."""
    return "this machine" if gpu == THIS_DEVICE else fmt_plain(gpu)


def gpu_title(gpu: object) -> str:
    """A GPU as a title names it: 'GPU h200', or 'this machine' (its peaks measured)."""
    return gpu_name(gpu) if gpu == THIS_DEVICE else f"GPU {gpu_name(gpu)}"


def _split(record: Mapping[str, Any]) -> str:
    """', tp 8, ep 8, the attention data-parallel' as far as the record's model is split
    over ranks, its experts whole over them and its attention data-parallel, else ''."""
    tp = f", tp {record['tp']}" if record.get("tp", 1) > 1 else ""
    ep = f", ep {record['ep']}" if record.get("ep") else ""
    return tp + ep + (f", the attention {record['attention']}" if record.get("attention") else "")


#: The table of `predict`: one row per point, part and phase (phase_rows).
PHASE_COLUMNS: list[Column] = [
    Column("Model", "name", fmt_plain, rank=0, kind="label", setting=True),
    Column("Variant", "variant", fmt_plain, rank=0, kind="label", setting=True, cell=variant_cell),
    Column("GPU", "gpu", gpu_name, rank=0, kind="label", setting=True, title_text=gpu_title),
    Column("tp", "tp", fmt_int, rank=2, setting=True),
    Column("ep", "ep", fmt_int, rank=1, setting=True),
    Column("attention", "attention", fmt_plain, rank=1, kind="label", setting=True),
    Column("batch", "batch", fmt_int, rank=1, setting=True),
    Column("context", "seq_len", fmt_int, rank=1, setting=True),
    Column("output", "output_len", fmt_int, rank=1, setting=True),
    Column("dtype", "dtype", fmt_plain, rank=2, kind="label", setting=True),
    Column("kv dtype", "kv_dtype", fmt_plain, rank=1, kind="label", setting=True),
    Column("weights", "weights", fmt_plain, rank=1, kind="label", setting=True),
    Column("vocab", "vocab", fmt_plain, rank=2, kind="label", setting=True),
    Column("Step", "step", fmt_plain, rank=0, kind="label"),
    Column("ms", "time_ms", fmt_4sig, rank=0),
    Column("bytes", "bytes", format_bytes, rank=1),
    Column("FLOPs", "flops", fmt_si, rank=1),
    Column("FLOP/B", "intensity", fmt_4sig, rank=2),
    Column("ridge FLOP/B", "ridge", fmt_4sig, rank=3, setting=True),
    Column("Bound", "bound", fmt_plain, rank=0, kind="label"),
    Column("tokens/s", "tokens_per_s", fmt_rate, rank=0),
]

#: The row of one request's time to first token at a batch of several prompts: its own
#: prompt prefilled alone (at batch 1, the model TTFT row is that).
REQUEST_TTFT = "request TTFT"
#: (step, record prefix, time field) of each row of a point, in order: one attention
#: layer's prefill and decode step, then the whole model's (time to first token, time per
#: output token).
PHASES = (
    ("layer prefill", "layer_prefill", "layer_prefill_ms"),
    ("layer decode", "layer_step", "layer_step_ms"),
    ("model TTFT", "prefill", "ttft_ms"),
    (REQUEST_TTFT, "request", "request_ttft_ms"),
    ("model TPOT", "step", "tpot_ms"),
    ("generation", "generation", "generation_ms"),
    ("serving ITL", "serving", "serving_itl_ms"),
)
#: The model's prefill row of a batch of several prompts: the prefill of them all, which is
#: no request's time to first token alone (batch_prefill_note says what it is).
BATCH_PREFILL = "model prefill"


def point_label(record: Mapping[str, Any]) -> str:
    """A record's model, or its layer shape ('d4096 h32/8')."""
    if record.get("model"):
        return str(record["model"])
    return f"d{record['d_model']} h{record['num_heads']}/{record['num_kv_heads']}"


def phase_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each record as its rows: the layer's prefill and decode step and, with a model, the
    model's; tokens/s on the model's decode row (the batch's tokens per step), or on the
    layer's where there is no model."""
    rows = []
    # the vocabulary's layout is named where some point replicates it
    split = "split" if any(r.get("vocab") for r in records) else None
    # and the experts' ranks where some point splits them whole, and the attention's
    # split where some point's is data-parallel
    expert_parallel = any(r.get("ep") for r in records)
    split_attention = "split" if any(r.get("attention") for r in records) else None
    for r in records:
        for step, prefix, time_field in PHASES:
            if r.get(time_field) is None or (prefix == "request" and r["batch"] == 1):
                continue  # at batch 1, the model TTFT row is the request's
            decode = prefix in ("step", "serving") or (
                prefix == "layer_step" and r.get("tpot_ms") is None
            )
            if prefix == "prefill" and r["batch"] > 1:
                step = BATCH_PREFILL
            rate = r["batch"] / (r[time_field] * 1e-3) if decode else None
            rows.append(
                {
                    "name": point_label(r),
                    "variant": r["variant"],
                    "num_kv_heads": r["num_kv_heads"],
                    "published_kv_heads": r.get("published_kv_heads"),
                    "gpu": r["gpu"],
                    "tp": r["tp"],
                    "ep": r.get("ep") or (1 if expert_parallel else None),
                    "attention": r.get("attention") or split_attention,
                    "batch": r["batch"],
                    "seq_len": r["seq_len"],
                    "output_len": r.get("output_len"),
                    "dtype": r["dtype"],
                    "kv_dtype": r["kv_dtype"],
                    "weights": r.get("weights") or r["dtype"],
                    "vocab": r.get("vocab") or split,
                    "step": step,
                    "time_ms": r[time_field],
                    "bytes": r.get(f"{prefix}_bytes"),
                    "flops": r.get(f"{prefix}_flops"),
                    "intensity": r.get(f"{prefix}_intensity"),
                    "ridge": r["ridge_flops_per_byte"],
                    "bound": r.get(f"{prefix}_bound"),
                    "tokens_per_s": r["output_tokens_per_s"] if prefix == "generation" else rate,
                }
            )
    return rows


def generation_note(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the generation and serving ITL rows are, once, with each point's step at
    its generation's mean context."""
    whole = [r for r in records if r.get("generation_ms") is not None]
    if not whole:
        return []
    steps = "; ".join(
        dict.fromkeys(
            f"{r['generation_tpot_ms']:.4g} ms at {r['seq_len'] + r['output_len'] // 2:,}"
            for r in whole
            if r.get("generation_tpot_ms") is not None
        )
    )
    there = f" (a step there: {steps})" if steps else ""
    return [
        "generation: the batch's prefill, then a decode step per further output token, "
        f"each at the mean context, context + output / 2{there}; "
        "tokens/s: its output tokens over the whole. serving ITL: the time between a "
        "request's tokens with batch requests kept in flight, each replaced by a new one "
        "as it ends: that step, plus the others' prefills counted whole (an upper bound "
        "where an engine chunks them into its steps)"
    ]


def batch_prefill_note(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the model's prefill of a batch of several prompts is, once: the prefill of all
    of them, which a request waits for when its prompt is prefilled with the others; a
    request prefilled alone waits for the prefill of one prompt (batch 1, as fit's time
    to first token target counts it)."""
    batches = sorted({r["batch"] for r in records if r["batch"] > 1 and r.get("ttft_ms")})
    if not batches:
        return []
    listed = ", ".join(f"{b:,}" for b in batches)
    return [
        f"{BATCH_PREFILL}: the prefill of all the batch's prompts (batch {listed}) in one "
        "pass, the time to first token of each request prefilled with the others; "
        f"{REQUEST_TTFT}: one request's prompt prefilled alone"
    ]


#: A URL in a source, with what joins it to its text: ': URL' after a description, or
#: '(URL' (and ')' where the parentheses hold it alone). It runs to a space, a semicolon
#: or a parenthesis (no source's URL holds one), less a closing full stop or comma.
_CITED_URL = re.compile(r"(: | ?\()?(https?://[^\s;()]*[^\s;().,])(\))?")


class References:
    """The URLs that sources cite, each numbered once, in the order first cited. A text
    cites a URL as '[n]', so that its lines wrap between words; the URLs are listed at the
    end, one a line (`lines`), each whole, to be clicked or copied."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}

    def cite(self, text: str) -> str:
        """`text` with each URL as its number: 'triad, ND H100 v5: URL' reads 'triad, ND
        H100 v5 [1]', 'reaches (URL)' reads 'reaches [2]'."""
        return _CITED_URL.sub(self._citation, text)

    def _citation(self, match: re.Match[str]) -> str:
        before, url, after = match.groups()
        number = f"[{self._numbers.setdefault(url, len(self._numbers) + 1)}]"
        if before is None:
            return number + (after or "")
        if before.strip() == "(" and after:  # the parentheses held the URL alone
            return f" {number}"
        return before.replace(": ", " ") + number + (after or "")

    def lines(self) -> list[str]:
        """'[n] URL', one per URL cited, in the order of their numbers, the numbers
        aligned on the right (' [9]', '[10]') so that the URLs start in one column."""
        width = len(f"[{len(self._numbers)}]")
        return [f"[{n}]".rjust(width) + f" {url}" for url, n in self._numbers.items()]


def _figures(text: str) -> list[str]:
    """A device's figures (DeviceSpec.figures), one each: `text` split at each '; '
    outside parentheses, since a figure's source, in them, may hold '; ' of its own."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        if depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
    return [*parts, text[start:]]


def device_sources(
    records: Sequence[Mapping[str, Any]], references: References
) -> list[tuple[str, list[str]]]:
    """Each device of the predictions once, as its name and its figures, each figure with
    its source and, for a named GPU, its datasheets; their URLs cited in `references`."""
    devices = []
    for gpu, r in {r["gpu"]: r for r in records}.items():
        figures = [references.cite(figure) for figure in _figures(r["device_figures"])]
        if gpu != THIS_DEVICE:  # this machine's figures are its probes', given above
            sheets = [references.cite(s) for s in r["peaks_source"].split("; ")]
            figures.append(f"datasheets {', '.join(sheets)}")
        devices.append((f"{gpu_name(gpu)} ({r['device_title']}):", figures))
    return devices


def source_notes(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where the rest of the numbers come from: the parts of a step beyond its bytes and
    FLOPs (collectives, launches, dequantisation, tile padding), the efficiencies and
    overhead and whether they are defaults or calibrated, the weights' format, and the
    counts."""
    lines = []
    with_collectives = [r for r in records if r.get("allreduce_ms")]
    split = {
        (r["gpu"], r["tp"], r.get("vocab"), r.get("attention"), bool(r.get("norm_allreduces"))): r
        for r in with_collectives
    }
    for r in split.values():
        around = "an all-gather and a reduce-scatter" if r.get("attention") else "2 all-reduces"
        collectives = around + " a layer"
        if r.get("norm_allreduces"):  # q and k norms that span the heads split over the ranks
            collectives += ", 1 more in each attention layer for its q and k norms"
        collectives += "" if r.get("vocab") else ", the logits' gather"
        replicated = ", each rank holding the whole vocabulary" if r.get("vocab") else ""
        replicated += ", the attention data-parallel" if r.get("attention") else ""
        lines.append(
            f"{r['gpu']}, tp {r['tp']}{replicated}: the model's collectives ({collectives}) "
            f"take {r['allreduce_ms']:.3g} ms of each decode step at batch {r['batch']:,}"
        )
    for r in {r["gpu"]: r for r in records if r.get("launch_ms")}.values():
        first_ms = r.get("memory_latency_ms")
        first = f", their waits for their first bytes {first_ms:.3g} ms" if first_ms else ""
        lines.append(
            f"{r['gpu']}: the model's kernel launches take {r['launch_ms']:.3g} ms of each "
            f"step{first}"
        )
    # the busiest rank's experts are more of them where they are split whole (ep)
    dequantised = (r for r in records if r.get("dequant_ms"))
    splits = ("tp", "ep", "attention")
    for r in {(r["gpu"], r["weights"], *map(r.get, splits)): r for r in dequantised}.values():
        lines.append(
            f"{r['gpu']}{_split(r)}: dequantising the weights ({r['weights']}) on the CUDA cores "
            f"takes {r['dequant_ms']:.3g} ms of each decode step (2 operations a weight for "
            "int8, 5 for int4, 4 for mxfp4, at the device's float32 rate)"
        )
    padded = (r for r in records if r.get("padding_ms"))
    for r in {(r["gpu"], r["batch"], *map(r.get, splits)): r for r in padded}.values():
        lines.append(
            f"{r['gpu']}{_split(r)}: the rows its tensor cores compute as zeros, to fill whole "
            f"tiles, take {r['padding_ms']:.3g} ms of each decode step at batch {r['batch']:,}"
        )
    warp = (r for r in records if r.get("warp_mma_ms"))
    for r in {(r["gpu"], r["batch"], *map(r.get, splits)): r for r in warp}.values():
        lines.append(
            f"{r['gpu']}{_split(r)}: the weight-only kernel on the warp-level mma.sync, "
            f"slower than the device's full-rate instruction, takes {r['warp_mma_ms']:.3g} ms "
            f"more of each decode step at batch {r['batch']:,}"
        )
    surcharge = " + mma.sync's surcharge" if any(r.get("warp_mma_ms") for r in records) else ""
    # a layer's row waits too, where the step that would say so is not predicted
    timed = any(LOAD_LATENCY in r["device_figures"] for r in records)
    waits = " + first loads" if timed else ""
    for text in dict.fromkeys(r["perf_model"] for r in records):
        lines.append(
            "time = bytes / bandwidth + FLOPs / matmul rate, for the dense matmuls and the "
            "attention core (its QK^T and PV at the attention kernel's rate), + launches"
            f"{waits} + collectives + dequantisation + tile padding{surcharge} + overhead, "
            f"with {text}"
        )
    quantised = [r for r in records if r.get("weights")]
    for r in {(r["weights"], bool(r.get("model"))): r for r in quantised}.values():
        stored = WeightFormat(r["weights"].split()[0])  # "int4 in groups of 128" -> int4
        peak = peak_name(stored.matmul_dtype(r["dtype"]))
        rate = f"matmuls at the {r['peak_tflops']:,.4g} TFLOP/s of {peak}"
        if r.get("model"):
            head = QUANTIZED_HEAD in r["weights"]  # quantised with the rest
            kept = f"the embeddings{'' if head else ' and the output head'} stay {r['dtype']}"
            if KEPT_ATTENTION in r["weights"]:
                kept += ", as do the attention's projections, at its rate"
            if ON_TENSOR_CORES in r["weights"]:
                kept += (
                    f"; the weight-only kernel multiplies on the tensor cores in tiles of "
                    f"{WEIGHT_ONLY_TILE} tokens, as Marlin's mma.sync m16n8k16 does"
                )
            lines.append(f"weights: {r['weights']} (scales counted; {kept}); {rate}")
            continue
        # a layer shape: its projections, their dequantisation in the layer's times
        dequant = (
            ", dequantised on the CUDA cores at the device's float32 rate"
            if stored.dequant_ops
            else ""
        )
        lines.append(
            f"weights: {r['weights']}, the layer's projections (scales counted{dequant}); {rate}"
        )
    lines.append(
        "bytes and FLOPs: attnbench's counts (weights per rank, KV cache read and "
        "written, activations; a model's MLP or active experts, embeddings and head)"
    )
    for r in {r["model"]: r for r in records if r.get("step_state_bytes")}.values():
        lines.append(
            f"{r['model']}: each decode step also reads and writes the state of its state "
            f"layers, {format_bytes(r['step_state_bytes'])} on each GPU at batch "
            f"{r['batch']:,} (in the cache's bytes), their recurrence at {STATE_FLOPS} FLOPs "
            "per element of the state per token"
        )
    return lines


def fit_notes(records: list[dict]) -> list[str]:
    """What a reader must know before the table's times: the points whose weights and
    KV cache do not fit on their GPUs, predicted all the same."""
    lines = []
    for r in records:
        if r.get("fits_memory") is False:
            needed = format_bytes(r["memory_bytes_needed_per_gpu"])
            context = r["seq_len"] + (r.get("output_len") or 0)
            lines.append(
                f"{point_label(r)} does not fit on {r['gpu']}: {needed} of weights and KV "
                f"cache per GPU at tp {r['tp']}, batch {r['batch']:,}, context "
                f"{context:,} (see fit); predicted all the same"
            )
    return lines


#: The table of a check: one row per measured sample.
CHECK_COLUMNS: list[Column] = [
    Column("#", "row", fmt_int, rank=0),
    Column("Sample", "kind", fmt_plain, rank=0, kind="label"),
    Column("bytes", "bytes", format_bytes, rank=2),
    Column("KV bytes", "kv_bytes", format_bytes, rank=3),
    Column("FLOPs", "flops", fmt_si, rank=2),
    Column("measured ms", "measured_ms", fmt_4sig, rank=0),
    Column("predicted ms", "predicted_ms", fmt_4sig, rank=0),
    Column("error", "error_pct", lambda v: f"{v:+.1f}%", rank=0),
    Column("Bound", "bound", fmt_plain, rank=1, kind="label"),
]


def check_rows(rows: Sequence[CheckRow]) -> list[dict[str, Any]]:
    """The rows of a check's table, each sample named by its label."""
    return [
        {
            "row": i + 1,
            "kind": row.sample.label,
            "bytes": row.sample.bytes,
            "kv_bytes": row.sample.kv_bytes,
            "flops": row.sample.flops,
            "measured_ms": row.measured_s * 1e3,
            "predicted_ms": row.predicted_s * 1e3,
            "error_pct": 100 * row.rel_error,
            "bound": row.bound,
        }
        for i, row in enumerate(rows)
    ]


def _step(record: Mapping[str, Any]) -> tuple[str, Any, Any]:
    """What a finding states of a record's step: ('TPOT', its ms, its bound) for a model,
    ('layer step', ...) for a layer shape."""
    bound = record.get("step_bound") or record.get("layer_step_bound")
    if record.get("tpot_ms") is not None:
        return "TPOT", record["tpot_ms"], bound
    return "layer step", record.get("layer_step_ms"), bound


def _stated(record: Mapping[str, Any]) -> bool:
    """Whether a record holds what its finding states (a results file edited by hand may
    leave out what the reader lets it: such a row has no finding)."""
    _, time, bound = _step(record)
    model, rate = record.get("perf_model"), record.get("tokens_per_s")
    keys = all(isinstance(record.get(k), int) for k in ("batch", "seq_len", "tp"))
    return (
        keys
        and isinstance(model, str)
        and isinstance(rate, (int, float))
        and (isinstance(time, (int, float)) and isinstance(bound, str))
    )


def predict_findings(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per predicted point and its GPUs: 'llama-3-8b at batch 1, context
    8,192 (predicted, defaults): 158 tokens/s on h100-sxm (TPOT 6.32 ms, memory-bound),
    98 on a100-80gb (10.2 ms, memory-bound).'"""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in filter(_stated, records):
        split = (r["tp"], r.get("ep"), r.get("attention"))
        settings = (*split, r.get("weights"), r.get("vocab"), r.get("output_len"))
        what = (point_label(r), r["batch"], r["seq_len"], r["perf_model"], settings)
        groups.setdefault(what, []).append(r)
    found = []
    for (name, batch, seq_len, model, settings), rows in groups.items():
        tp, ep, attention, weights, vocab, output = settings
        split = f", {output:,} tokens out" if output else ""
        split += f", tp {tp}" if tp > 1 else ""
        split += f", ep {ep}" if ep else ""
        split += f", the attention {attention}" if attention else ""
        split += f", weights {weights}" if weights else ""
        split += f", the vocabulary {vocab}" if vocab else ""
        source = "defaults" if model.endswith("(defaults)") else "calibrated"
        on = [
            f"{fmt_rate(r['tokens_per_s'])} tokens/s on {r['gpu']} ({what} {ms:.3g} ms, "
            f"{bound}-bound"
            f"{_generation_text(r)}"
            f"{'; does not fit in its memory' if r.get('fits_memory') is False else ''})"
            for r in rows
            for what, ms, bound in [_step(r)]
        ]
        found.append(
            f"{name} at batch {batch:,}, context {seq_len:,}{split} (predicted, {source}): "
            + ", ".join(on)
            + "."
        )
    return found


def _generation_text(record: Mapping[str, Any]) -> str:
    """'; the whole generation 8.0 s, 7.83 ms between tokens in flight' where the record
    predicts them (a one-token generation has no time between tokens); '' where it
    predicts none, or a hand-edited file's row leaves them out."""
    whole, itl = record.get("generation_ms"), record.get("serving_itl_ms")
    said = []
    if isinstance(whole, (int, float)):
        said.append(f"the whole generation {whole / 1e3:.3g} s")
    if isinstance(itl, (int, float)):
        said.append(f"{itl:.3g} ms between tokens in flight")
    return f"; {', '.join(said)}" if said else ""
