"""`attnbench decode-speed`: prefill and per-token decode latency, cache vs no cache."""

from __future__ import annotations

import torch
import typer

from ..experiments.decode import DecodeOptions, decode_record, link_speedups
from ..measure.devices import resolve_device
from ..measure.environment import collect_environment
from ..measure.timing import measure_peak_gbps
from ..model.formulas import MODEL_DTYPES
from ..study.output import fmt_f1, fmt_int, fmt_ms, fmt_plain, fmt_x
from ..study.sweep import load_config, resolve
from . import app
from .common import (
    ConfigOpt,
    CsvOpt,
    DModelOpt,
    HeadDimOpt,
    HeadsOpt,
    HfConfigOpt,
    JsonOpt,
    KvHeadsOpt,
    ModelOpt,
    QuietOpt,
    console,
    err_console,
    fail,
    handles_errors,
    model_refs,
    parse_choice_list,
    parse_int,
    parse_int_list,
    progress_iter,
    render_table,
    shape_overrides,
    write_outputs,
)

COLUMNS = [
    ("Model", "model", fmt_plain),
    ("Variant", "variant", fmt_plain),
    ("Backend", "backend", fmt_plain),
    ("batch", "batch", fmt_int),
    ("prompt", "prompt_len", fmt_int),
    ("gen", "gen_len", fmt_int),
    ("Mode", "mode", fmt_plain),
    ("prefill ms", "prefill_ms", fmt_ms),
    ("step ms (median)", "step_ms_median", fmt_ms),
    ("p25", "step_ms_p25", fmt_ms),
    ("p75", "step_ms_p75", fmt_ms),
    ("total ms", "total_ms", fmt_ms),
    ("tokens/s", "tokens_per_s", fmt_f1),
    ("speed-up", "speedup_vs_no_cache", fmt_x),
    ("GB/s", "achieved_gbps", fmt_f1),
    ("% peak", "pct_of_peak_bw", fmt_f1),
    ("Noisy", "noisy", fmt_plain),
    ("Status", "status", fmt_plain),
]


def describe(point: dict) -> str:
    name = (
        point.get("model") or f"d{point['d_model']} h{point['num_heads']}/{point['num_kv_heads']}"
    )
    return (f"{name} {point['backend']} {point.get('dtype') or 'float32'} batch {point['batch']} "
            f"prompt {point['prompt_len']} gen {point['gen_len']} {point['mode']}")  # fmt: skip


@app.command("decode-speed")
@handles_errors
def decode_speed_command(
    config: ConfigOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    batch: str = typer.Option(None, "--batch", help="Batch sizes, comma-separated."),
    prompt_len: str = typer.Option(None, "--prompt-len", help="Prompt lengths, comma-separated."),
    gen_len: str = typer.Option(None, "--gen-len", help="Tokens generated per run."),
    dtype: str = typer.Option(None, "--dtype", help="float32 (default), float16 or bfloat16."),
    device: str = typer.Option(None, "--device", help="auto (default), cpu, cuda or cuda:i."),
    backend: str = typer.Option(None, "--backend", help="sdpa (default), naive, or both."),
    mode: str = typer.Option(None, "--mode", help="cache, no_cache, or both (default)."),
    prefill: bool = typer.Option(
        None,
        "--prefill/--no-prefill",
        help="Prefill the prompt (timed), or fill the cache with random K/V instead.",
    ),  # fmt: skip
    warmup: str = typer.Option(None, "--warmup", help="Untimed generations first (default 2)."),
    repeats: str = typer.Option(None, "--repeats", help="Timed generations (default 3)."),
    threads: str = typer.Option(None, "--threads", help="CPU threads (torch.set_num_threads)."),
    cuda_graph: bool = typer.Option(
        None, "--cuda-graph/--no-cuda-graph", help="Replay each decode step as a CUDA graph."
    ),
    flush_l2: bool = typer.Option(
        None, "--flush-l2/--no-flush-l2", help="Flush the GPU L2 cache before each step."
    ),
    csv: CsvOpt = None,
    json: JsonOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Prefill and per-token decode latency of one attention layer, with the KV cache and
    without it, against the memory bandwidth measured on the same device."""
    overrides = {
        **shape_overrides(d_model, heads, kv_heads, head_dim),
        "batch": parse_int_list("--batch", batch),
        "prompt_len": parse_int_list("--prompt-len", prompt_len),
        "gen_len": parse_int_list("--gen-len", gen_len),
        "dtype": parse_choice_list("--dtype", dtype, MODEL_DTYPES),
        "backend": parse_choice_list("--backend", backend, ("sdpa", "naive")),
        "mode": parse_choice_list("--mode", mode, ("cache", "no_cache")),
        "device": device,
        "prefill": prefill,
        "warmup": parse_int("--warmup", warmup, minimum=0),
        "repeats": parse_int("--repeats", repeats),
        "threads": parse_int("--threads", threads),
        "cuda_graph": cuda_graph,
        "flush_l2": flush_l2,
    }
    study = resolve(load_config(config), "decode", overrides, model_refs(model, hf_config))
    opts = study.options
    dev = resolve_device(opts["device"])
    if opts["threads"]:
        torch.set_num_threads(opts["threads"])
    points = study.points()
    if dev.type == "cpu" and any((p.get("dtype") or "float32") != "float32" for p in points):
        err_console.print("warning: half precision on the CPU runs, but slowly")
    options = DecodeOptions.from_options(opts)
    env = collect_environment(dev)
    env["peak_gbps"] = measure_peak_gbps(dev)
    records = [decode_record(p, dev, options, env["peak_gbps"])
               for p in progress_iter(points, describe, quiet)]  # fmt: skip
    link_speedups(records)
    if not quiet:
        peak = f"peak copy bandwidth {env['peak_gbps']:.1f} GB/s"
        title = f"Decode on {env['device_name']} ({dev}), {peak}"
        console.print(render_table(title, records, COLUMNS))
    write_outputs("decode-speed", records, study.to_dict(), env, csv, json, quiet)
    failed = [r for r in records if r.status != "ok"]
    if failed:
        raise fail(f"{len(failed)} of {len(records)} points did not complete: "
                   + "; ".join(sorted({r.status for r in failed})), code=1)  # fmt: skip
