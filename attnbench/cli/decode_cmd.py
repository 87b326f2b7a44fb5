"""`attnbench decode-speed`: prefill and per-token decode latency, cache vs no cache."""

from __future__ import annotations

from ..experiments.decode import DecodePoint, DecodeRecord
from ..render.columns import DECODE
from ..study.runner import Task, plan_command, run_study
from . import app
from .common import (
    CONFIG,
    HF_CONFIG,
    MODEL,
    OUTPUTS,
    check_writable,
    err_console,
    fail,
    model_refs,
    progress_iter,
    show_table,
    write_outputs,
)
from .flags import section_command


def describe(point: DecodePoint) -> str:
    """'d512 h8/8 sdpa float32 batch 1 prompt 64 gen 4 cache'."""
    name = point.model or f"d{point.d_model} h{point.num_heads}/{point.num_kv_heads}"
    return (f"{name} {point.backend} {point.dtype} batch {point.batch} "
            f"prompt {point.prompt_len} gen {point.gen_len} {point.mode}")  # fmt: skip


@section_command(app, "decode-speed", "decode", before=[CONFIG, MODEL, HF_CONFIG], after=OUTPUTS)
def decode_speed_command(overrides, config, model, hf_config, csv, json, wide, quiet) -> None:
    """Prefill and per-token decode latency of one attention layer, with the KV cache and
    without it, against the memory bandwidth measured on the same device."""
    check_writable({"csv": csv, "json": json}, {"config": config, "hf_config": hf_config})
    plan = plan_command("decode", config, overrides, model_refs(model, hf_config))
    if plan.device.type == "cpu" and any(t.point.dtype != "float32" for t in plan.tasks):
        err_console.print("warning: half precision on the CPU runs, but slowly")

    def progress(tasks: list[Task]):
        return progress_iter(tasks, lambda t: describe(t.point), quiet, weight=plan.estimate)

    result = run_study(plan, command="decode-speed", progress=progress)
    records = result.records["decode"]
    env = result.environment
    if not quiet:
        peak = f"peak copy bandwidth {env['peak_gbps']:.1f} GB/s"
        show_table(f"Decode on {env['device_name']}, {peak}",
                   result.section_records("decode"), DECODE, wide)  # fmt: skip
    config_doc = plan.sections["decode"].to_dict()
    write_outputs("decode-speed", records, DecodeRecord, config_doc, env, csv, json, quiet)
    failed = [r for r in records if r.status != "ok"]
    if failed:
        raise fail(f"{len(failed)} of {len(records)} points did not complete: "
                   + "; ".join(sorted({r.status for r in failed})), code=1)  # fmt: skip
