"""`attnbench models` and `attnbench env`: what attnbench knows and where it runs."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer
from rich.text import Text

from ..model.presets import PRESETS
from ..render.columns import MODELS
from ..study.schema import DEFAULT_DEVICE
from .common import console, handles_errors, show_table
from .group import app
from .options import DeviceOpt, SourceWideOpt

#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 80
SHORT_HELP = {
    "models": "List the model presets: attention shapes and sources",
    "env": "Print the environment recorded with every result",
    "selfcheck": "Check backends, cached decode and KV-cache sizes on a device",
}


@app.command("models")
def models_command(
    wide: SourceWideOpt = False,
) -> None:
    """List the model presets with their attention architecture and source."""
    rows = [{**asdict(p), "variant": p.variant} for p in PRESETS.values()]
    show_table("Model presets", rows, MODELS, wide, hint=None)


@app.command("env")
@handles_errors
def env_command(device: DeviceOpt = DEFAULT_DEVICE) -> None:
    """Print the environment recorded with every result (as its JSON spells the values:
    null where the device has none)."""
    from ..measure.devices import resolve_device
    from ..measure.environment import collect_environment

    for key, value in collect_environment(resolve_device(device)).items():
        shown = value if isinstance(value, str) else json.dumps(value)
        console.print(f"{key}: {shown}", highlight=False, markup=False)


@app.command("selfcheck")
@handles_errors
def selfcheck_command(device: DeviceOpt = DEFAULT_DEVICE) -> None:
    """Check on a device that attnbench's attention (its sdpa and naive kernels) matches a
    float64 reference and its cached decode a full pass, that every provider's step
    matches the reference, and that a real KV cache has the analytic size. Exit 1 on
    failure."""
    from ..experiments.selfcheck import run_checks
    from ..measure.devices import resolve_device

    dev = resolve_device(device)
    results = run_checks(dev)
    for r in results:
        mark = ("PASS", "green") if r.passed else ("FAIL", "bold red")
        console.print(Text.assemble(mark, f" {r.name}: {r.detail}"))
    failed = sum(not r.passed for r in results)
    console.print(f"{len(results) - failed} passed, {failed} failed on {dev}", highlight=False)
    if failed:
        raise typer.Exit(1)
