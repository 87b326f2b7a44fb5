"""What every command shares: the consoles, failing with a message (and turning a bad
input into one), registering a section's command with its flags (cli/options.py declares
them), tables, saying where outputs went and the progress display.

The command modules import torch, matplotlib and the study machinery (which imports
them) inside the functions that use them, never at the top: `attnbench --help` and every
command's help then start without loading them (tests/cli/test_startup.py)."""

from __future__ import annotations

import functools
import inspect
import os
import signal
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from ..errors import FieldError, UsageError
from ..model.dtypes import served_dtype
from ..model.files import bad_name, dangling_folder, refuse_empty, shown_path
from ..records import as_dict
from ..render.columns import join_words
from ..render.table import (
    DEFAULT_WIDTH,
    Column,
    build_table,
    page_columns,
    plain_console,
    print_view,
    terminal_width,
)
from ..study.output import Written, beside_csv_path, writable, writable_target
from ..study.schema import ALIASES, fields_for
from ..study.sections import command_of
from .flags import describe_error, flag_of, parse_flags
from .options import field_flag

if TYPE_CHECKING:
    from ..study.runner import Plan, RunResult


def drop_bad_terminal_size() -> None:
    """Unset COLUMNS and LINES when they hold no size: rich reads them with str.isdigit(),
    which passes '²', and then fails to convert it; and it prints nothing, errors
    included, on a console 0 columns wide. Such a value says nothing of the terminal, so
    it is as good as unset."""
    for name in ("COLUMNS", "LINES"):
        text = os.environ.get(name, "")
        if text and not (text.isascii() and text.isdigit() and int(text) > 0):
            del os.environ[name]


drop_bad_terminal_size()


def _page_width() -> int | None:
    """On a terminal, the terminal's width (None: rich finds it); off one, the page's
    (page_columns: a pipe into `less` in a terminal of 80 columns gets 80), else 120."""
    if sys.stdout.isatty():
        return None
    return page_columns() or DEFAULT_WIDTH


#: Off a terminal, long lines (paths, findings) stay whole for the reader to wrap; on one,
#: rich wraps them between words. Every text printed is literal (`plain_console`).
console = plain_console(width=_page_width(), soft_wrap=not sys.stdout.isatty())


def fit_console_to_page() -> None:
    """Size the console for this invocation (COLUMNS may differ from one to the next)."""
    drop_bad_terminal_size()
    console.width = _page_width()  # type: ignore[assignment]
    console.soft_wrap = not sys.stdout.isatty()


err_console = plain_console(stderr=True)

#: How a listed item (a finding) starts, and how its later lines are indented under it;
#: and a note under a table or an answer.
BULLET, NOTE = "  - ", "note: "


def print_items(items: Sequence[str], bullet: str = BULLET) -> None:
    """Each item after `bullet`. On a terminal, wrapped between words to its width with a
    hanging indent: the later lines start under the item's text, not under the bullet.
    Off one, the same at the page's width where it is known (page_columns), else each
    item on one line, whole, for the reader to wrap."""
    hang = " " * len(bullet)
    whole = console.soft_wrap and page_columns() is None
    for item in items:
        if whole:
            console.print(bullet + item, markup=False, highlight=False)
            continue
        width = max(console.width, len(bullet) + 20)
        lines = textwrap.wrap(
            item, width, initial_indent=bullet, subsequent_indent=hang, break_on_hyphens=False
        )
        for line in lines or [bullet.rstrip()]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)


#: Exit status after Ctrl-C (128 + SIGINT), as shells report it; also after SIGTERM or
#: SIGHUP, which stop a run as Ctrl-C does.
EXIT_INTERRUPTED = 130


def stop_notice(signum: int) -> None:
    """Said on the first Ctrl-C (or SIGTERM, SIGHUP): the run stops after these points."""
    again = "Ctrl-C" if signum == signal.SIGINT else f"{signal.Signals(signum).name} or Ctrl-C"
    err_console.print(f"stopping after the current points ({again} again to stop now)")


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `error: message` (one line per problem) on stderr; return the Exit to raise."""
    for line in message.splitlines():
        err_console.print(Text.assemble(("error:", "bold red"), f" {line}"), soft_wrap=True)
    return typer.Exit(code)


def handles_errors(fn: Callable) -> Callable:
    """Turn a UsageError into one line per problem on stderr and its exit code (2 for bad
    input), never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as exc:
            raise fail(describe_error(exc), exc.exit_code) from None

    return wrapper


def section_command(
    app: typer.Typer,
    section: str,
    before: Sequence[str] = (),
) -> Callable[[Callable], Callable]:
    """Register `fn(overrides, **flags)` as the command that runs `section` alone
    (study.sections.command_of: 'decode-speed' for decode), with a flag per field of
    `section` (see options.field_flag) after fn's own flags named in `before`
    and before the rest of them (fn's parameters after `overrides`, declared as every
    flag is: cli/options.py); `overrides` holds the parsed field values, None where a flag
    was not given."""
    names = fields_for(section)
    aliases = {old: new for old, new in ALIASES.items() if new in names}

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            given = {n: kwargs.pop(n) for n in names}
            for old, new in aliases.items():
                value = kwargs.pop(old)
                if value is not None and given[new] is not None:
                    raise FieldError(old, value, f"is the old name of {flag_of(new)}; give one")
                given[new] = value if value is not None else given[new]
            return fn(parse_flags(section, given), **kwargs)

        own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        first = [p for p in own if p.name in before]
        rest = [p for p in own if p.name not in before]
        generated = [field_flag(section, n) for n in names]
        hidden = [field_flag(section, new, old) for old, new in aliases.items()]
        params = [*first, *generated, *hidden, *rest]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        app.command(command_of(section))(handles_errors(command))
        return fn

    return decorate


def model_refs(model: str | None, hf_config: str | None) -> list[str] | None:
    """--model / --hf-config as a list of model references (None when neither is given)."""
    if model is not None and not model.strip():  # a variable the shell found unset
        reason = "empty; give a preset's name (attnbench models) or a config.json"
        raise FieldError("model", model, reason)
    if model and hf_config:
        raise UsageError("--model and --hf-config: give one or the other, not both")
    from ..study.sweep import is_model_file  # the config readers: not for --help

    if hf_config:
        return [hf_config if is_model_file(hf_config) else f"./{hf_config}"]
    return [model] if model else None


def run_section(
    section: str,
    config: str | None,
    overrides: dict,
    model: str | None,
    hf_config: str | None,
    outputs: dict[str, str | None],
    write: bool = True,
) -> tuple[Plan, RunResult, Written]:
    """A command's one-section study: the outputs checked against the flags' inputs, then
    planned, checked against every file the plan reads (study.plan.section_inputs), run
    and (unless not `write`) written by the library (study.runner.run_command)."""
    from ..study.plan import section_inputs
    from ..study.runner import run_command
    from ..study.sections import KINDS

    # what is there is judged once the plan has named every input (`reads`)
    check_writable(outputs, {"config": config, "hf_config": hf_config}, contents=False)
    refs = model_refs(model, hf_config)
    csv_path, json_path = (outputs.get("csv"), outputs.get("json")) if write else (None, None)

    def reads(plan: Plan) -> None:  # the files the plan found (a sweep file names them)
        inputs = {"config": config, "hf_config": hf_config, **section_inputs(plan, section)}
        check_writable(outputs, inputs)
        if plan.sections[section].models:  # what the sets beside the records come from
            check_beside(csv_path, json_path, KINDS[section].beside, inputs)

    try:
        return run_command(section, config, overrides, refs, csv_path, json_path, check=reads)
    except FieldError as exc:
        if model is None or exc.field != "hf_config":
            raise
        # a config.json given as --model: its problem named as the user gave it
        raise FieldError("model", model, exc.reason_with()) from None


def model_notes(models: Sequence, contexts: Sequence[int] = ()) -> None:
    """What a model's counts leave out, once per model ('gemma-3-4b-it: the language
    model of a multimodal config: its vision or audio encoder is not counted'), and the
    `contexts` asked for past the positions it declares (computed all the same). The
    variants of a what-if set share their model's notes."""
    notes = []
    for spec in {spec.name: spec for spec in models}.values():
        if spec.note:
            notes.append(f"{spec.name}: {spec.note}")
        if spec.counted is not None:
            notes.append(
                f"{spec.name}: whole model counted by {spec.counted.source}, not by "
                "attnbench's formulas; per tensor-parallel rank, its parts split evenly"
            )
        if spec.unknown_kinds is not None:  # params counts it; kvmem, predict and fit refuse
            notes.append(f"{spec.name}: {spec.unknown_kinds}; its cache is not counted")
        if any(s is not None and s.recurrent_dtype for s in spec.layer_states):
            notes.append(
                f"{spec.name}: the state layers' recurrent state is counted in float32, as "
                "transformers keeps it whatever the model's dtype (a serving engine may "
                "keep it in the model's)"
            )
        limit = spec.max_position_embeddings
        past = sorted({c for c in contexts if limit and c > limit})
        if past:
            listed = join_words([f"{c:,}" for c in past])
            what = f"context {listed} is" if len(past) == 1 else f"contexts {listed} are"
            notes.append(
                f"{spec.name}: {what} past its {limit:,} positions "
                "(max_position_embeddings); computed all the same"
            )
    print_items(notes, bullet=NOTE)


def served_notes(models: Sequence, done: str, fields: Sequence[str]) -> None:
    """A note for each model whose checkpoint is stored in a dtype no engine serves it in
    (float32): `done` ('predicted on the named GPUs') in the dtype engines load it in, and
    the flags of `fields` that keep its own (weights_dtype none where the checkpoint's
    quantisation sets the weights)."""
    notes = []
    for spec in {spec.name: spec for spec in models}.values():
        served = served_dtype(spec.dtype)
        if served == spec.dtype:
            continue
        kept = [f for f in fields if not (f == "weights_dtype" and spec.stored_weights)]
        keep = " ".join(f"{flag_of(f)} {spec.dtype}" for f in kept)
        notes.append(
            f"{spec.name}: its checkpoint is {spec.dtype}; {done} in {served}, as "
            "serving engines load it (vLLM's --dtype auto)"
            + (f"; {keep} keeps {spec.dtype}" if keep else "")
        )
    print_items(notes, bullet=NOTE)


def show_table(
    title: str,
    records: Sequence,
    columns: Sequence[Column],
    wide: bool,
    hint: str | None = "--csv",
) -> None:
    """A table that fits the terminal: constant settings go to the title, low-ranked
    columns go when it is too narrow (a last line names them), numbers are never cut."""
    rows = [as_dict(r) for r in records]
    width = terminal_width(console)
    view = build_table(
        title, rows, columns, width, wide, hint="--wide" + f", or {hint}" * bool(hint)
    )
    print_view(console, view)


def check_writable(
    outputs: dict[str, str | None],
    inputs: Mapping[str, str | Sequence[str] | None],
    contents: bool = True,
) -> None:
    """Fail before anything runs when an output cannot be written: a directory, a special
    file, a read-only file, a folder that is not a writable directory, one of the
    command's own `inputs`, the same file as another output, or (with `contents`) a file
    of another kind (_not_replaceable); or when an input's name can name no file (too
    long). Both map a field (csv, config...) to the path given for it (an input, to its
    paths: "models", the config.json files a sweep file lists); errors name the field's
    flag."""
    reads = [(field, path) for field, paths in inputs.items() for path in as_paths(paths)]
    for field, path in [*outputs.items(), *reads]:
        refuse_empty(field, path)
    given = [(field, path) for field, path in outputs.items() if path]
    for field, path in given:
        if str(path).endswith(("/", os.sep)):  # Path() drops the slash: 'out/' would be 'out'
            raise FieldError(field, path, "names a folder (it ends with /); give a file's name")
    for field, path in reads:
        problem = bad_name(path)
        if problem:
            raise FieldError(field, shown_path(path), f"cannot read it: {problem}")
    for i, (field, path) in enumerate(given):
        reason = _unwritable_reason(Path(path))
        same_input = next((f for f, other in reads if same_file(path, other)), None)
        earlier = next((f for f, other in given[:i] if same_file(path, other)), None)
        if reason is None and same_input is not None:
            reason = f"is {_what_reads(same_input)}, an input of this command; write the "
            reason += "output elsewhere"
        elif reason is None and earlier is not None:
            reason = f"is also the {flag_of(earlier)} output; give each output its own file"
        if reason is None and contents:
            reason = _not_replaceable(field, Path(path))
        if reason is not None:
            raise FieldError(field, shown_path(path), reason)


#: The outputs that are JSON documents (results, a baseline, a calibration), and what
#: starts an SQLite database (a history).
JSON_OUTPUTS = ("json", "to")
SQLITE_HEADER = b"SQLite format 3\x00"


def _not_replaceable(field: str, p: Path) -> str | None:
    """Why the file at `p` must not be replaced by the `field` output, or None: a history
    database, a binary file where text goes, or a file that is no JSON where a JSON
    document goes (a sweep file, notes): what is there is not an earlier output of this
    kind, and a slip of the path would lose it. A picture (history plot --out) or a
    side's log may replace anything."""
    if field not in (*JSON_OUTPUTS, "csv", "output"):
        return None
    try:
        with open(p, "rb") as existing:
            head = existing.read(4096)
    except OSError:  # none yet, or the writer says why
        return None
    if not head.strip():
        return None
    if head.startswith(SQLITE_HEADER):
        what = "an SQLite database (a history?)"
    elif b"\x00" in head:
        what = "a binary file"
    elif field in JSON_OUTPUTS and not head.lstrip().startswith(b"{"):
        what = "a file that is not JSON"
    elif field == "csv" and b"," not in head.splitlines()[0]:
        what = "a file that is not CSV"
    else:
        return None
    return f"is {what}, not an earlier output of this kind; not replaced: give another path"


def _what_reads(field: str) -> str:
    """The input a field names, as an error says it: 'the --config file'."""
    if field == "models":
        return "a model config.json the sweep file lists"
    return f"the {flag_of(field)} file"


def check_beside(
    csv: str | None,
    json: str | None,
    names: Iterable[str],
    inputs: Mapping[str, str | Sequence[str] | None],
) -> None:
    """The CSVs a command writes beside its --csv (out.csv -> out.<name>.csv, one for each
    of `names`) are outputs too: FieldError naming --csv when one cannot be written, or
    is one of the command's `inputs` (by field) or its --json output."""
    for side in (beside_csv_path(csv, name) for name in names) if csv else ():
        reason = _unwritable_reason(Path(side))
        reads = (f for f, paths in inputs.items() for p in as_paths(paths) if same_file(side, p))
        if reason is None and (field := next(reads, None)):
            reason = f"is {_what_reads(field)}, an input of this command"
        elif reason is None and json and same_file(side, json):
            reason = "is also the --json output"
        if reason is not None:  # 'is a directory', 'cannot write in ...'
            joined = f", which {reason}" if reason.startswith("is ") else f": {reason}"
            raise FieldError("csv", shown_path(csv), f"writes {side} beside it{joined}")


def as_paths(paths: str | Sequence[str] | None) -> Sequence[str]:
    """An input's paths: one, several (the config.json files a sweep file lists), or none."""
    return [paths] if isinstance(paths, str) else paths or ()


def timestamped_dir(prefix: str = "") -> Path:
    """A new directory's name under results/, from the time: results/<prefix>20261005-120000."""
    return Path("results") / datetime.now().strftime(f"{prefix}%Y%m%d-%H%M%S")


def same_file(a: str | Path, b: str | Path) -> bool:
    """Two names of one file: equal once resolved (symlinks too), or hard links."""
    try:
        return os.path.realpath(a) == os.path.realpath(b) or os.path.samefile(a, b)
    except (OSError, ValueError):  # not there; a NUL in a name
        return False


def _unwritable_reason(p: Path) -> str | None:
    """Why a file cannot be written at `p` (what is there, or the folder it would go in),
    or None."""
    problem = bad_name(p) or dangling_folder(p)  # before a folder on the way is made
    if problem:
        return problem
    try:
        # what is there: the writer's own checks (a link too: a loop, or one to no file
        # yet, which writes its target's folder)
        if (p.is_symlink() or p.exists()) and writable_target(p).exists():
            return None
        folder = Path(os.path.realpath(p)).parent  # a symlink to no file yet writes its target
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent  # the folder to create it in, or the first one there is
    except OSError as exc:  # also a name too long to look up
        return exc.strerror
    except ValueError as exc:  # a NUL in the name
        return str(exc)
    if not folder.is_dir():
        return f"cannot write in {shown_path(folder)}: not a directory"
    if not writable(folder):
        return f"cannot write in {shown_path(folder)}: not a writable directory"
    return None


def show_written(written: Written, quiet: bool) -> None:
    """Say where the outputs went; then fail with why the rest were not written."""
    if not quiet:
        for path in written.paths:
            console.print(f"wrote {path}", markup=False)
    if written.failure is not None:
        raise written.failure


#: A run estimated longer than this, in seconds, says its estimate before it starts.
LONG_RUN_S = 60.0


def progress_iter(
    items: Sequence,
    describe: Callable[[Any], str],
    quiet: bool = False,
    weight: Callable[[Any], float] | None = None,
):
    """Yield items with a progress bar (points done, ETA) on a terminal; off a terminal,
    one plain line per item. `weight` (e.g. each item's estimated seconds) paces the bar
    and its ETA when items differ in cost; without it every item counts the same. A run
    whose weights add up to over LONG_RUN_S says its estimate first."""
    if quiet:
        yield from items
        return
    weigh = weight or (lambda _: 1.0)
    total = sum(map(weigh, items))
    if weight is not None and total > LONG_RUN_S:
        console.print(
            f"{len(items):,} points to run, about {total:,.0f} s (a rough estimate)",
            markup=False,
        )
    if console.is_terminal:
        from rich import progress as rp
        from rich.table import Column as RichColumn

        text = RichColumn(ratio=1, no_wrap=True, overflow="ellipsis")  # the rest of the line
        columns = (
            rp.TextColumn("{task.fields[count]}"),
            rp.BarColumn(bar_width=30),
            rp.TextColumn("ETA"),
            rp.TimeRemainingColumn(),
            rp.TextColumn("{task.description}", markup=False, table_column=text),
        )
        with rp.Progress(*columns, console=console, transient=True, expand=True) as progress:
            task = progress.add_task("", total=total, count="")
            for i, item in enumerate(items, 1):
                progress.update(task, description=describe(item), count=f"{i}/{len(items)}")
                yield item
                progress.advance(task, weigh(item))
        return
    for i, item in enumerate(items, 1):
        console.print(f"[{i}/{len(items)}] {describe(item)}", highlight=False, markup=False)
        yield item
