"""Tables that fit the terminal: one engine for every command's table and the report.

A table is described by a list of `Column`s (see columns.py for every command's list) and
built from records (plain dicts). `build_table` makes it fit a given width without cutting
a number: settings that are the same in every row move into the title, then columns with a
shorter form switch to it, then the least important columns are hidden (and named in a
footer line). A status is never hidden: when its cell shows the first word alone
("skipped"), the reason after it goes in a note under the table, shortened only when it
would take more than a few lines. `markdown_table` renders the same columns as GitHub
Markdown.

Widths follow rich's default table layout: each column takes its text plus one space of
padding on either side and one border, and the table one border more.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import os
import re
import stat
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import ceil
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: Column kinds. Numbers, statuses and labels are never cut, wrapped or folded; text may fold.
KINDS = ("number", "status", "text", "label")
#: Characters a column adds to the table beyond its text (two of padding, one border).
COLUMN_EXTRA = 3
#: Characters a table adds beyond its columns (the last border).
TABLE_EXTRA = 1
#: A text column is only kept when it fits with its longest cell on at most this many lines.
TEXT_MAX_LINES = 3
#: What joins the title and the settings every row shares.
TITLE_SEPARATOR = " · "
#: Terminal width assumed off a terminal when COLUMNS does not say.
DEFAULT_WIDTH = 120
#: A note under the table (a status's reason) takes at most this many lines; a longer one
#: is shortened, ending with NOTE_CUT.
NOTE_MAX_LINES = 3
NOTE_CUT = "…"
#: How the lines of a note after its first are indented.
NOTE_INDENT = "  "
#: The status that says nothing the table does not: a status column that reads it in every
#: row may be hidden for width like any other.
OK = "ok"
#: What ends the cell of a ratio whose 95% interval spans 1 (Column.legend says so).
UNRESOLVED = "?"


@dataclass(frozen=True)
class Column:
    """One column of a table, and how its cells read.

    header: the column's heading ("step ms", "kv heads").
    field: the record field it shows.
    fmt: a value's full cell text (None shows as "-").
    rank: importance; lower is more important, and the highest rank is hidden first when
        the table is too wide (of two equal ranks, the later column goes first).
    kind: "number" (right-justified), "status" or "label" (left-justified): never cut,
        wrapped or folded; "text" (notes, sources): left-justified, folds into the space
        the other columns leave. A status column is never hidden, unless every row reads
        'ok'; when its cell shows less than the record's status ('skipped' of 'skipped:
        needs 40.00 GiB, 22.86 GiB free'), the whole status goes in a note under the table.
    compact: a shorter cell text ("67.1 M" for 67,108,864), used when the table does not
        fit with the full one.
    setting: a setting of the sweep (model, dtype, batch, ...): when it reads the same in
        every row, it leaves the table for the title.
    title_text: how a constant setting reads in the title ("d_model 4,096"); the default
        is the header and the cell text ("batch 1").
    cell: the full cell text from the whole record, for cells made of several fields (the
        spread of a timing); it replaces fmt. The column is still left out when `field` is
        None in every row.
    group: columns of one group switch to their compact form together (the providers of
        a side-by-side table: all with their speed-ups, or none).
    keep: never hidden for width, whatever its rank (a status's reason in a column of its
        own); status columns are kept too, unless every row reads 'ok'.
    reason_by: for a status column, the record field whose values a note names beside
        its row count ('(sdpa-efficient, 4 rows)'); without it, the count alone.
    noted_elsewhere: for a status column, the command prints the whole statuses itself
        (fit's notes name each variant): the table gives no notes.
    legend: a note under the table where some cell ends with UNRESOLVED (a ratio whose
        interval spans 1), saying what the mark means.
    """

    header: str
    field: str
    fmt: Callable[[Any], str]
    rank: int = 50
    kind: str = "number"
    compact: Callable[[Any], str] | None = None
    setting: bool = False
    title_text: Callable[[Any], str] | None = None
    cell: Callable[[Mapping[str, Any]], str] | None = None
    group: str | None = None
    keep: bool = False
    reason_by: str | None = None
    noted_elsewhere: bool = False
    legend: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"Column {self.header!r}: kind must be one of {KINDS}, not {self.kind!r}"
            )

    def value(self, row: Mapping[str, Any]) -> Any:
        """The record's value for this column (None when the record lacks the field)."""
        return row.get(self.field)

    def text(self, row: Mapping[str, Any]) -> str:
        """The full cell text."""
        return self.cell(row) if self.cell is not None else self.fmt(self.value(row))

    def short_text(self, row: Mapping[str, Any]) -> str:
        """The compact cell text (the full one when the column has no compact form)."""
        if self.compact is None or self.cell is not None:
            return self.text(row)
        return self.compact(self.value(row))

    def title_part(self, row: Mapping[str, Any]) -> str:
        """How this setting, constant over the rows, reads in the title."""
        if self.title_text is not None:
            return self.title_text(self.value(row))
        return f"{self.header} {self.text(row)}"

    @property
    def justify(self) -> str:
        return "right" if self.kind == "number" else "left"


@dataclass
class TableView:
    """A table built to fit a width, and what was left out of it to fit.

    table: the rich table to print.
    title: its title on one line (the table's own may be broken between settings).
    hidden: headers of the columns hidden for width, most important first.
    shared: the title parts of the settings every row shares (they are in the title).
    needed_width: the width the table takes: at most the width asked for, unless `wide`
        (or unless a single column alone is wider). With `wide` the table's own `width`
        is set to it, so print it uncropped (`print_view`, or a console that wide).
    compacted: headers of the columns shown in their compact form.
    hint: how to see the hidden columns, the end of the footer line.
    notes: the whole statuses that status cells show in part, one each ('skipped:
        needs 40.00 GiB, 22.86 GiB free'), for under the table.
    page_width: the width the notes are wrapped to.
    """

    table: Table
    title: str
    hidden: list[str]
    shared: list[str]
    needed_width: int
    compacted: list[str] = field(default_factory=list)
    hint: str = ""
    notes: list[str] = field(default_factory=list)
    page_width: int = DEFAULT_WIDTH

    def note_lines(self) -> list[str]:
        """The notes as they print: each wrapped between words to `page_width`, its
        later lines indented, and shortened (ending with '…') past NOTE_MAX_LINES."""
        return [line for note in self.notes for line in fit_note(note, self.page_width)]

    def footer(self) -> str | None:
        """'3 columns hidden (p25, p75, noisy): <hint>', or None if none are."""
        if not self.hidden:
            return None
        count = len(self.hidden)
        noun = "column" if count == 1 else "columns"
        line = f"{count} {noun} hidden ({', '.join(self.hidden)})"
        return f"{line}: {self.hint}" if self.hint else line


def as_row(record: Any) -> Mapping[str, Any]:
    """A record as a mapping: a Mapping as it is, a dataclass instance by its fields."""
    if isinstance(record, Mapping):
        return record
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    raise TypeError(f"a table row must be a mapping or a dataclass, not {type(record).__name__}")


def present_columns(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> list[Column]:
    """The columns with a value in at least one row (a field None or missing in every row,
    like Model for synthetic shapes, is left out)."""
    return [c for c in columns if any(c.value(r) is not None for r in rows)]


def split_settings(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]
) -> tuple[list[Column], list[str]]:
    """(columns to show, title parts): each setting column whose cell reads the same in
    every row becomes a title part. Non-setting columns always stay, and when every column
    would leave, the most important of them (lowest rank, then first) stays."""
    if not rows:
        return list(columns), []
    constant = [
        i for i, c in enumerate(columns) if c.setting and len({c.text(r) for r in rows}) == 1
    ]
    if constant and len(constant) == len(columns):
        constant.remove(min(constant, key=lambda i: (columns[i].rank, i)))
    shown = [c for i, c in enumerate(columns) if i not in constant]
    return shown, [columns[i].title_part(rows[0]) for i in constant]


def table_width(widths: Sequence[int]) -> int:
    """The width rich's default table takes for columns of these text widths."""
    return sum(widths) + COLUMN_EXTRA * len(widths) + TABLE_EXTRA if widths else 0


@dataclass
class _Layout:
    """One column's candidate widths and cell texts."""

    column: Column
    index: int
    full: list[str]
    short: list[str]
    full_width: int
    short_width: int
    fit_width: int  # the least width it is kept at: the full width but for text columns
    compact: bool = False
    floor_width: int = 0  # a text column to keep shrinks down to this: its longest word
    full_notes: list[str] = field(default_factory=list)
    short_notes: list[str] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        return self.short_notes if self.compact else self.full_notes

    @property
    def hideable(self) -> bool:
        """Whether the fit may hide it: not a column to keep, nor a status column but one
        that reads 'ok' in every row."""
        if self.column.keep:
            return False
        return self.column.kind != "status" or all(c.strip() == OK for c in self.full)

    @property
    def same_on_every_row(self) -> bool:
        """A column of numbers that reads the same in every row of several: it tells less
        than any that tells them apart, and goes before them. (A label that does, such as
        the provider that is fastest in every row, is the answer: it stays at its rank.)"""
        same = len(self.full) > 1 and len(set(self.full)) == 1
        return same and self.column.kind == "number"

    @property
    def width(self) -> int:
        return self.short_width if self.compact else self.fit_width

    @property
    def cells(self) -> list[str]:
        return self.short if self.compact else self.full


def _longest(texts: Sequence[str]) -> int:
    return max((cell_len(t) for t in texts), default=0)


def reason_of(cell: str, status: Any) -> str | None:
    """The whole status a status cell shows in part ('skipped' of 'skipped: needs 40.00
    GiB, 22.86 GiB free'), or None when the cell shows it all or it has no reason (the
    part after a colon)."""
    if status is None or ":" not in str(status):
        return None
    whole = str(status).strip()
    return None if cell.strip() == whole else whole


def _note(status: str, rows: Sequence[Mapping[str, Any]], by: str | None) -> str:
    """'unsupported: no kernel (sdpa-cudnn, 4 rows)', naming the rows' values of `by`;
    without `by`, the count only for more than one row."""
    count = f"{len(rows)} row{'s' * (len(rows) != 1)}"
    if by is None:
        return status if len(rows) == 1 else f"{status} ({count})"
    names = list(dict.fromkeys(str(r.get(by)) for r in rows if r.get(by) is not None))
    return f"{status} ({', '.join([*names, count])})"


def with_reasons(
    column: Column, cells: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> tuple[list[str], list[str]]:
    """A status column's cells and the notes that give the statuses they show in part,
    one per status. A cell that stands for several statuses ('skipped' for two amounts
    of memory) is numbered, and so is its note: 'skipped [1]', '[1] skipped: needs ...'."""
    reasons = [reason_of(c, column.value(r)) for c, r in zip(cells, rows, strict=True)]
    whole: dict[str, list[str]] = {}  # cell -> the statuses it stands for
    for cell, reason in zip(cells, reasons, strict=True):
        if reason is not None and reason not in whole.setdefault(cell, []):
            whole[cell].append(reason)
    numbers: dict[str, int] = {}
    for statuses in whole.values():
        for status in statuses if len(statuses) > 1 else ():
            numbers[status] = len(numbers) + 1
    marked = [
        f"{c} [{numbers[r]}]" if r in numbers else c for c, r in zip(cells, reasons, strict=True)
    ]
    notes = []
    for status in dict.fromkeys(r for r in reasons if r is not None):
        group = [row for row, r in zip(rows, reasons, strict=True) if r == status]
        note = _note(status, group, column.reason_by)
        notes.append(f"[{numbers[status]}] {note}" if status in numbers else note)
    return marked, notes


def fit_note(text: str, width: int) -> list[str]:
    """A note as lines of at most `width` characters, broken between words, the later
    ones indented by NOTE_INDENT; past NOTE_MAX_LINES, shortened to end with NOTE_CUT."""
    width = max(width, 2 * len(NOTE_INDENT) + 1)
    lines = textwrap.wrap(text, width, subsequent_indent=NOTE_INDENT, break_on_hyphens=False)
    if len(lines) <= NOTE_MAX_LINES:
        return lines or [text]
    last = lines[NOTE_MAX_LINES - 1]
    rest = " ".join(line.strip() for line in lines[NOTE_MAX_LINES:])
    last = (last + " " + rest)[: width - cell_len(NOTE_CUT)].rstrip()
    return [*lines[: NOTE_MAX_LINES - 1], last + NOTE_CUT]


class _PlainConsole(Console):
    """A console whose output's reader going (`| head`) raises BrokenPipeError for the
    caller to answer, where rich's own exits with status 1, compare's "regression"."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def plain_console(**options: Any) -> Console:
    """A console that prints every text literally: user text (a model's name, a filter,
    a device) holding `[/]` or `:x:` is neither rich markup nor an emoji code, and
    no number or path gets coloured by highlighting. Style is given as Text or `style=`."""
    return _PlainConsole(markup=False, emoji=False, highlight=False, **options)


_MEASURE = plain_console(file=io.StringIO(), width=DEFAULT_WIDTH)


def _fold_width(texts: Sequence[str], least: int, most: int) -> int:
    """The least width from `least` up at which each text wraps (as rich wraps it,
    between words) onto at most TEXT_MAX_LINES lines; `most` if none below it does."""
    longest = sorted(set(texts), key=cell_len, reverse=True)
    for width in range(least, most):
        if all(len(Text(t).wrap(_MEASURE, width)) <= TEXT_MAX_LINES for t in longest):
            return width
    return most


def _layout(column: Column, index: int, rows: Sequence[Mapping[str, Any]], wide: bool) -> _Layout:
    header = cell_len(column.header)
    full = [column.text(r) for r in rows]
    short = [column.short_text(r) for r in rows]
    full_notes: list[str] = []
    short_notes: list[str] = []
    if column.kind == "status" and not column.noted_elsewhere:
        full, full_notes = with_reasons(column, full, rows)
        short, short_notes = with_reasons(column, short, rows)
    if column.legend and any(cell.endswith(UNRESOLVED) for cell in full):
        full_notes, short_notes = [column.legend], [column.legend]
    full_width = max(header, _longest(full))
    short_width = max(header, _longest(short))
    fit_width = full_width
    words = _longest([w for t in full for w in t.split()])
    if column.kind == "text" and not wide:
        least = max(header, words, ceil(_longest(full) / TEXT_MAX_LINES))
        fit_width = min(full_width, _fold_width(full, least, full_width))
    layout = _Layout(column, index, full, short, full_width, short_width, fit_width)
    layout.floor_width = min(fit_width, max(header, words)) if column.kind == "text" else fit_width
    layout.full_notes, layout.short_notes = full_notes, short_notes
    return layout


def _tells_rows_apart(lay: _Layout, shown: Sequence[_Layout]) -> bool:
    """Whether `lay` is a setting (a swept key: tp, dtype) without which some rows would
    read alike in every setting and label shown: hidden, they would look like
    duplicates."""
    if not lay.column.setting:
        return False
    keys = [other for other in shown if other.column.setting or other.column.kind == "label"]

    def distinct(columns: Sequence[_Layout]) -> int:
        return len(set(zip(*(c.full for c in columns), strict=True))) if columns else 1

    return distinct([k for k in keys if k is not lay]) < distinct(keys)


def _fit(layouts: list[_Layout], width: int) -> list[_Layout]:
    """Compact, then hide, columns until the table fits `width`; return the hidden ones.
    Columns of numbers that read the same in every row go first, then the others from the
    highest rank down, and last the settings that alone tell some rows apart. Columns to
    keep and statuses (but a column of 'ok' alone) are never hidden: at its rank, a text
    column to keep folds onto more lines instead. Compact forms that hiding made
    unnecessary are switched back to the full text, and text columns take the room still
    left, to fold onto fewer lines."""

    def total() -> int:
        return table_width([lay.width for lay in layouts])

    def together(lay: _Layout) -> list[_Layout]:
        """The column and the others of its group still shown."""
        group = lay.column.group
        return [other for other in layouts if other.column.group == group] if group else [lay]

    by_savings = sorted(
        (lay for lay in layouts if lay.short_width < lay.fit_width),
        key=lambda lay: (lay.short_width - lay.fit_width, -lay.column.rank, -lay.index),
    )
    for lay in by_savings:
        if total() <= width:
            break
        for member in together(lay):
            member.compact = True
    hidden: list[_Layout] = []
    # a text column to keep takes its turn at its rank: it folds onto more lines, as far as
    # the fit needs but never inside a word, instead of going
    turns = [lay for lay in layouts if lay.hideable or lay.column.kind == "text"]
    turns.sort(key=lambda lay: (not lay.same_on_every_row, -lay.column.rank, -lay.index))
    while turns and total() > width and len(layouts) > 1:
        # a setting that alone tells some rows apart goes after every other column
        lay = next((lay for lay in turns if not _tells_rows_apart(lay, layouts)), turns[0])
        turns.remove(lay)
        if not lay.hideable:
            lay.fit_width = max(lay.floor_width, lay.fit_width - (total() - width))
            continue
        layouts[:] = [other for other in layouts if other is not lay]
        hidden.append(lay)
    for lay in sorted(layouts, key=lambda lay: (lay.column.rank, lay.index)):
        if lay.compact:
            members = [member for member in together(lay) if member.compact]
            for member in members:
                member.compact = False
            if total() > width:
                for member in members:
                    member.compact = True
    folded = [lay for lay in layouts if lay.column.kind == "text"]  # the room left, to fold less
    for lay in sorted(folded, key=lambda lay: (-lay.full_width / lay.fit_width, lay.index)):
        if total() < width:
            lay.fit_width = min(lay.full_width, lay.fit_width + width - total())
    return sorted(hidden, key=lambda lay: (lay.column.rank, lay.index))


def build_table(
    title: str,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    width: int,
    wide: bool = False,
    hint: str = "",
) -> TableView:
    """A rich table of `rows` that fits `width` characters.

    Columns empty in every row are left out; settings constant over the rows move to the
    title ("Attention parameters per layer · d_model 4,096 · 32 heads"). If the rest is
    wider than `width`, columns with a compact form switch to it (largest saving first),
    then columns are hidden from the highest rank down until the table fits (never a
    status but one of 'ok' alone, nor a column to keep). A status shown in part gets a
    note (`notes`). With `wide`, nothing is compacted or hidden: the table is as wide as
    it needs (`needed_width`). Rows may be mappings or dataclass instances.
    """
    records = [as_row(r) for r in rows]
    shown, shared = split_settings(records, present_columns(records, columns))
    layouts = [_layout(c, i, records, wide) for i, c in enumerate(shown)]
    hidden = [] if wide else _fit(layouts, width)
    needed = table_width([lay.width for lay in layouts])

    full_title = TITLE_SEPARATOR.join([t for t in (title, *shared) if t])
    table = Table(title=wrap_title(title, shared, needed) or None, title_justify="left")
    if wide:
        table.width = needed
    for lay in layouts:
        col = lay.column
        if col.kind == "text":  # exactly the width the fit gave it: rich's own shrinking
            most = None if wide else lay.width  # can round a table past the page
            table.add_column(
                col.header, justify="left", overflow="fold", min_width=lay.width, max_width=most
            )
        else:
            table.add_column(col.header, justify=col.justify, no_wrap=True, min_width=lay.width)
    for i in range(len(records)):
        table.add_row(*(lay.cells[i] for lay in layouts))
    return TableView(
        table=table,
        title=full_title,
        hidden=[lay.column.header for lay in hidden],
        shared=shared,
        needed_width=needed,
        compacted=[lay.column.header for lay in layouts if lay.compact],
        hint=hint,
        notes=list(dict.fromkeys(note for lay in layouts for note in lay.notes)),
        page_width=width,
    )


def wrap_title(title: str, parts: Sequence[str], width: int) -> str:
    """`title · part · part`, broken into lines of at most `width` characters between
    parts rather than inside one ('no bias' stays whole), the title's own parts too; rich
    wraps a part that alone is wider than that."""
    title, *own = title.split(TITLE_SEPARATOR) if title else [""]
    parts = [*own, *parts]
    lines = [title] if title else []
    end = TITLE_SEPARATOR.rstrip()  # what a line that goes on ends with
    for i, part in enumerate(parts):
        more = end if i < len(parts) - 1 else ""
        if lines and cell_len(lines[-1] + TITLE_SEPARATOR + part + more) <= width:
            lines[-1] += TITLE_SEPARATOR + part
        elif lines and cell_len(lines[-1] + end) <= width:
            lines[-1] += end
            lines.append(part)
        elif lines:  # a line as wide as the page: the separator opens the next one
            lines.append(TITLE_SEPARATOR.lstrip() + part)
        else:
            lines.append(part)
    return "\n".join(lines)


def print_view(console: Console, view: TableView) -> None:
    """Print the table (uncropped, so a wide table may run past the terminal's edge), the
    notes of the statuses it shows in part, and its footer line when columns were
    hidden."""
    console.print(view.table, crop=False)
    for line in view.note_lines():
        console.print(line, highlight=False, markup=False, crop=False, soft_wrap=True)
    footer = view.footer()
    if footer:
        # wrapped between words at the page's width, whatever the console's default
        console.print(footer, style="dim", highlight=False, markup=False, soft_wrap=False)


def page_columns() -> int | None:
    """The width of the page that output off a terminal goes to, where it is known:
    $COLUMNS when it holds a positive whole number in ASCII digits, else, for a pipe (into
    `less` or `head`), the width of the terminal that standard error still goes to, or
    (`2>&1 | less`) that standard input still reads from; None for a file or a log."""
    text = os.environ.get("COLUMNS", "").strip()
    if text.isascii() and text.isdigit() and int(text) > 0:
        return int(text)
    try:
        if not stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode):
            return None
    except (AttributeError, OSError, ValueError):  # no file number (a capture)
        return None
    for stream in (sys.stderr, sys.stdin):
        try:
            return os.get_terminal_size(stream.fileno()).columns or None
        except (AttributeError, OSError, ValueError):  # no terminal there
            continue
    return None


def terminal_width(console: Console) -> int:
    """The width to fit tables to: the console's on a terminal; off one (a pipe, a log),
    the page's (page_columns), else 120."""
    return console.width if console.is_terminal else page_columns() or DEFAULT_WIDTH


#: What Markdown (GitHub's, CommonMark) may read as markup inside a line: emphasis,
#: links, HTML, entities, tables, strike-through and math; an underscore only where it
#: can open or close emphasis, at the edge of a word (`d_model` is left as it is). A
#: '>' is markup only where a line starts, which user text here never does ('8 -> 4').
MARKDOWN_SPECIAL = re.compile(r"[\\`*\[\]<&|$~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def markdown_text(text: str) -> str:
    """`text` as Markdown that shows it as written, on one line: what Markdown could
    read as markup escaped with a backslash (a model named `a*b*` stays `a*b*`)."""
    escaped = MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(), text)
    return escaped.replace("\r", " ").replace("\n", " ")


def markdown_fence(text: str, info: str = "") -> list[str]:
    """`text` as a fenced code block whose fence is longer than any run of backticks in
    it, so that no line of `text` can close it early."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]


def markdown_code(text: str) -> str:
    """`text` as an inline code span that holds it whole, backticks and all."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """A GitHub Markdown table of every column with a value in some row, in full text
    (never compact), number columns right-aligned; every cell shown as written
    (`markdown_text`)."""
    records = [as_row(r) for r in rows]
    shown = present_columns(records, columns)
    if not shown:
        return ""
    lines = [
        "| " + " | ".join(markdown_text(c.header) for c in shown) + " |",
        "|" + "|".join("---:" if c.kind == "number" else "---" for c in shown) + "|",
    ]
    for r in records:
        lines.append("| " + " | ".join(markdown_text(c.text(r)) for c in shown) + " |")
    return "\n".join(lines)
