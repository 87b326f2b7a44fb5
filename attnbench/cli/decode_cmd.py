"""`attnbench decode-speed`: prefill and per-token decode latency, cache vs no cache, by
every provider asked for; under torchrun with --tp T, one layer split over T ranks."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from typing import TYPE_CHECKING

import typer

from ..errors import FieldError
from ..records import as_dict, failed
from ..render.columns import decode_columns
from .common import (
    EXIT_INTERRUPTED,
    NOTE,
    check_writable,
    console,
    err_console,
    fail,
    model_refs,
    print_items,
    progress_iter,
    section_command,
    show_table,
    show_written,
    stop_notice,
)
from .group import app
from .options import ConfigOpt, CsvOpt, HfConfigOpt, JsonOpt, ModelOpt, QuietOpt, WideOpt

if TYPE_CHECKING:
    from ..experiments.decode import DecodeRecord
    from ..study.distributed import Launch
    from ..study.output import Written
    from ..study.runner import Plan, Task


#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 40
SHORT_HELP = {"decode-speed": "Prefill and decode-step latency, with and without the cache"}


@section_command(app, "decode", before=("config", "model", "hf_config"))
def decode_speed_command(
    overrides,
    config: ConfigOpt = None,
    model: ModelOpt = None,
    hf_config: HfConfigOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    wide: WideOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Prefill and per-token decode latency of one attention layer, with the KV cache and
    without it, against the memory bandwidth measured on the same device. Under torchrun,
    --tp T splits the layer over the T ranks: each step is the slowest rank's, with the
    all-reduce of the output timed alone beside it. Ctrl-C stops it after the current
    points: those that finished are shown and written (exit 130)."""
    from ..study.distributed import process_group, torchrun_launch
    from ..study.runner import plan_command, run_study, write_section
    from ..study.sections import describe_decode

    check_writable({"csv": csv, "json": json}, {"config": config, "hf_config": hf_config})
    models = model_refs(model, hf_config)
    plan = plan_command("decode", config, overrides, models)
    launch = torchrun_launch(min_ranks=1)
    check_tensor_parallel(plan, launch)
    if launch is not None:
        if plan.device.type == "cuda":  # each rank on its own GPU
            own = {**overrides, "device": str(launch.device(plan.device))}
            plan = plan_command("decode", config, own, models)
        if launch.rank > 0:  # one rank reports and writes
            quiet, csv, json = True, None, None
    if (
        not quiet
        and plan.device.type == "cpu"
        and any(t.point.dtype != "float32" for t in plan.tasks)
    ):
        err_console.print("warning: half precision on the CPU runs, but slowly")
    counting = getattr(plan.options.get("decode"), "instructions", False)
    if not quiet and counting and any(t.point.cached for t in plan.tasks):
        err_console.print(  # one valgrind process counts them all before the first point
            "note: counting instructions under valgrind first, every cached point in one "
            "process: a minute or more with nothing shown",
            markup=False,
        )

    # The first Ctrl-C (or SIGTERM, SIGHUP) stops the run after the current group of
    # points, whose finished rows are then shown and written; a second one stops at once.
    # Not under torchrun: every rank would stop after a group of its own, and the others
    # would wait for it in their collectives.
    stop = threading.Event()

    def progress(tasks: list[Task]):
        if stop.is_set():  # stopped before the first point (probing the peaks)
            return
        yield from progress_iter(
            tasks, lambda t: describe_decode(t.point), quiet, weight=plan.estimate
        )

    ranks = process_group(plan.device) if launch is not None else nullcontext()
    with ranks:
        result = run_study(
            plan,
            command="decode-speed",
            stop=stop,
            on_interrupt=stop_notice if launch is None else None,
            progress=progress,
        )
    records = result.records["decode"]
    if result.interrupted and not records:  # no file replaced by an empty one
        raise interrupted(0, result.total, "no file written" if csv or json else "")
    env = result.environment
    if not quiet:
        show_results(result.section_records("decode"), env, wide)
    written = write_section("decode", plan, result, csv, json)
    if result.interrupted and written.failure is not None:  # first; then what failed
        interrupted(len(records), result.total, _holding(quiet, written))
    show_written(written, quiet)
    warn_wrong(records)
    broken = [r for r in records if failed(as_dict(r))]
    if broken:
        failure = fail(
            f"{len(broken)} of {len(records)} points did not complete: "
            + "; ".join(sorted({r.status for r in broken})),
            code=1,
        )
        if not result.interrupted:
            raise failure
    if result.interrupted:
        raise interrupted(len(records), result.total, _holding(quiet, written))


def interrupted(finished: int, total: int, held: str) -> typer.Exit:
    """Say on stderr how many points of a run stopped by Ctrl-C finished, and what holds
    their rows (`held`); the exit to raise (130, as after any Ctrl-C)."""
    where = f"; {held}" if held else ""
    err_console.print(
        f"interrupted: {finished} of {total} points finished{where}",
        markup=False,
        soft_wrap=True,
    )
    return typer.Exit(EXIT_INTERRUPTED)


def _holding(quiet: bool, written: Written) -> str:
    """'the table and the files hold those': what shows or keeps the finished rows."""
    shown = ["the table"] if not quiet else []
    shown += ["the files" if len(written.paths) > 1 else "the file"] if written.paths else []
    if not shown:
        return ""
    plural = len(shown) > 1 or shown == ["the files"]
    return f"{' and '.join(shown)} {'hold' if plural else 'holds'} those"


def check_tensor_parallel(plan: Plan, launch: Launch | None) -> None:
    """--tp T needs T processes started by torchrun, and torchrun's ranks need --tp."""
    tp = next((t.point.tp for t in plan.tasks), 1)
    if launch is None and tp > 1:
        raise FieldError(
            "tp",
            tp,
            f"splits each point over {tp} processes; start them with "
            f"torchrun --standalone --nproc-per-node {tp} -m attnbench "
            f"decode-speed --tp {tp} ...",
        )
    if launch is not None and tp != launch.world_size:
        ranks = launch.world_size
        raise FieldError(
            "tp",
            tp,
            f"torchrun started {ranks} ranks, and every point is "
            f"split over all of them: give --tp {ranks}",
        )


def show_results(rows: list[dict], env: dict, wide: bool) -> None:
    """Every point's row (the table gives the reasons behind the statuses it shortens, by
    provider) and, with several providers, their cached steps side by side."""
    peak = f"peak copy bandwidth {env['peak_gbps']:.1f} GB/s"
    show_table(f"Decode on {env['device_name']}, {peak}", rows, decode_columns(rows), wide)
    models = ", ".join(dict.fromkeys(r["model"] for r in rows if r.get("model")))
    if models:  # a row of a model reads like the model's: it is one layer of it
        print_items(
            [
                f"each row times one attention layer of {models} (projections, cache and "
                "attention), not the whole model, and tok/s is that layer's; a whole "
                "model's step: attnbench predict"
            ],
            bullet=NOTE,
        )
    show_providers(rows, env, wide)


def show_providers(rows: list[dict], env: dict | None = None, wide: bool = False) -> None:
    """With several providers, their cached steps side by side (after a blank line), and
    why a row names no fastest provider (with the run's environment `env`: the host's
    speed moved); nothing otherwise. `attnbench run` shows it too."""
    from ..render.providers import providers_table

    side = providers_table(rows, env)
    if side.rows:
        console.print()
        show_table(side.title, side.rows, side.columns, wide, hint=None)
        print_items(side.notes, bullet=NOTE)


def warn_wrong(records: list[DecodeRecord]) -> None:
    """One line on stderr naming the providers whose output disagrees with the reference
    (rows, not errors: the exit status does not change)."""
    from ..render.report import provider_points

    parts = provider_points([as_dict(r) for r in records], "wrong", by_reason=False)
    if not parts:
        return
    noun = "provider disagrees" if len(parts) == 1 else "providers disagree"
    err_console.print(
        f"warning: {len(parts)} {noun} with the reference: " + "; ".join(parts),
        markup=False,
        soft_wrap=True,
    )
