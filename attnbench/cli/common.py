"""What every command shares: flag parsing, error handling, tables and output files."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import UsageError
from ..study.output import as_dict, json_document, write_csv, write_json_atomic

# Off a terminal (pipes, CI logs) rich would wrap tables at 80 columns; give them room.
console = Console(width=None if sys.stdout.isatty() else 240)
err_console = Console(stderr=True, highlight=False)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `error: message` (one line per problem) on stderr; return the Exit to raise."""
    for line in message.splitlines():
        err_console.print(f"[bold red]error:[/] {line}", markup=True, soft_wrap=True)
    return typer.Exit(code)


def handles_errors(fn: Callable) -> Callable:
    """Turn UsageError into a one-line message and exit code 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as exc:
            raise fail(str(exc), exc.exit_code) from None

    return wrapper


def parse_int(flag: str, text: str | None, minimum: int = 1) -> int | None:
    """An integer flag, checked: '--d-model: expected an integer, got 'abc''."""
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise UsageError(f"{flag}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise UsageError(f"{flag}: must be >= {minimum}, got {value}")
    return value


def parse_int_list(flag: str, text: str | None, minimum: int = 1) -> list[int] | None:
    """A comma-separated list of integers: '32,8,4,1'."""
    if text is None:
        return None
    items = [t for t in str(text).split(",")]
    if not items or any(not t.strip() for t in items):
        raise UsageError(f"{flag}: expected comma-separated integers, got {text!r}")
    return [parse_int(flag, t, minimum) for t in items]  # type: ignore[misc]


def parse_choice_list(flag: str, text: str | None, choices: Sequence[str]) -> list[str] | None:
    """A comma-separated list of names, each one of `choices`."""
    if text is None:
        return None
    items = [t.strip() for t in str(text).split(",")]
    for item in items:
        if item not in choices:
            raise UsageError(f"{flag}: unknown value {item!r}; choose from {', '.join(choices)}")
    return items


Column = tuple[str, str, Callable[[Any], str]]


def render_table(title: str, records: Sequence, columns: Sequence[Column]) -> Table:
    """A rich table: one row per record, columns given as (header, field, formatter)."""
    table = Table(title=title, title_justify="left")
    for header, _, _ in columns:
        table.add_column(header, justify="right" if header[:1].islower() else "left")
    for rec in records:
        row = as_dict(rec)
        table.add_row(*(fmt(row.get(field)) for _, field, fmt in columns))
    return table


def write_outputs(
    command: str,
    records: Sequence,
    config: dict,
    environment: dict,
    csv_path: str | None,
    json_path: str | None,
    quiet: bool,
) -> None:
    """Write the CSV and JSON a command was asked for and say where they went."""
    if csv_path:
        write_csv(csv_path, records)
        if not quiet:
            console.print(f"wrote {csv_path}")
    if json_path:
        write_json_atomic(json_path, json_document(command, records, config, environment))
        if not quiet:
            console.print(f"wrote {json_path}")


# Options shared by the commands (typer.Annotated aliases keep each command's signature short).
ConfigOpt = Annotated[
    str | None, typer.Option("--config", help="YAML sweep file; flags override it.")
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="A model preset (see `attnbench models`), case-insensitive."),
]
HfConfigOpt = Annotated[
    str | None, typer.Option("--hf-config", help="Path to a Hugging Face config.json.")
]
DModelOpt = Annotated[str | None, typer.Option("--d-model", help="Model width, e.g. 4096.")]
HeadsOpt = Annotated[str | None, typer.Option("--heads", help="Query heads, e.g. 32.")]
KvHeadsOpt = Annotated[
    str | None, typer.Option("--kv-heads", help="KV heads, comma-separated: 32,8,4,1.")
]
HeadDimOpt = Annotated[
    str | None, typer.Option("--head-dim", help="Head dimension (default d_model / heads).")
]
CsvOpt = Annotated[str | None, typer.Option("--csv", help="Write the records as CSV here.")]
JsonOpt = Annotated[
    str | None, typer.Option("--json", help="Write records, config and environment as JSON.")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only errors.")]


def shape_overrides(d_model, heads, kv_heads, head_dim) -> dict:
    """Flag values for the shape fields (lists, as sweep axes), None where not given."""
    return {
        "d_model": parse_int_list("--d-model", d_model),
        "num_heads": parse_int_list("--heads", heads),
        "num_kv_heads": parse_int_list("--kv-heads", kv_heads),
        "head_dim": parse_int_list("--head-dim", head_dim),
    }


def model_refs(model: str | None, hf_config: str | None) -> list[str] | None:
    """--model / --hf-config as a list of model references (None when neither is given)."""
    if model and hf_config:
        raise UsageError("--model and --hf-config: give one or the other, not both")
    if hf_config:
        return [hf_config if hf_config.endswith(".json") or "/" in hf_config
                else f"./{hf_config}"]  # fmt: skip
    return [model] if model else None


def progress_iter(
    items: Sequence,
    describe: Callable[[Any], str],
    quiet: bool = False,
    weight: Callable[[Any], float] | None = None,
):
    """Yield items with a progress bar (points done, ETA) on a terminal; off a terminal,
    one plain line per item. `weight` (e.g. each item's estimated seconds) paces the bar
    and its ETA when items differ in cost; without it every item counts the same."""
    if quiet:
        yield from items
        return
    if console.is_terminal:
        from rich import progress as rp
        from rich.table import Column

        weigh = weight or (lambda _: 1.0)
        text = Column(ratio=1, no_wrap=True, overflow="ellipsis")  # the rest of the line
        columns = (rp.TextColumn("{task.fields[count]}"), rp.BarColumn(bar_width=30),
                   rp.TextColumn("ETA"), rp.TimeRemainingColumn(),
                   rp.TextColumn("{task.description}", markup=False,
                                 table_column=text))  # fmt: skip
        with rp.Progress(*columns, console=console, transient=True, expand=True) as progress:
            task = progress.add_task("", total=sum(weigh(item) for item in items), count="")
            for i, item in enumerate(items, 1):
                progress.update(task, description=describe(item), count=f"{i}/{len(items)}")
                yield item
                progress.advance(task, weigh(item))
        return
    for i, item in enumerate(items, 1):
        console.print(f"[{i}/{len(items)}] {describe(item)}", highlight=False, markup=False)
        yield item
