"""The `attnbench` command line: parses flags, calls the library, renders results."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from types import ModuleType
from typing import Any

#: The longest line SHORT_HELP may hold: 80 columns, less the indent, the longest command
#: name ('decode-speed') and the gap after it.
SHORT_HELP_MAX = 80 - 2 - len("decode-speed") - 2


def keep_hyphenated_words_whole() -> None:
    """Help text wraps between words, never inside a hyphenated name ('sdpa-' on one line,
    'efficient' on the next, which reads as two names): click's wrapper, which typer
    ships, breaks at hyphens by default. Where typer ships no such wrapper, nothing
    changes."""
    try:
        from typer._click import _textwrap
    except ImportError:  # a typer that wraps help otherwise
        return
    wrapper = getattr(_textwrap, "TextWrapper", None)
    if wrapper is None or getattr(wrapper, "keeps_hyphenated_words", False):
        return

    class WholeWords(wrapper):  # type: ignore[misc, valid-type]
        keeps_hyphenated_words = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("break_on_hyphens", False)
            super().__init__(*args, **kwargs)

    _textwrap.TextWrapper = WholeWords


keep_hyphenated_words_whole()


from .group import app  # noqa: E402  (the commands register on it)


def _command_modules() -> list[ModuleType]:
    """Every command module (cli/*_cmd.py), imported, which registers its commands on
    `app`, in the order of their ORDER: where their commands come in `--help`."""
    names = [found.name for found in pkgutil.iter_modules(__path__) if found.name.endswith("_cmd")]
    modules = [importlib.import_module(f"{__name__}.{name}") for name in names]
    return sorted(modules, key=lambda module: module.ORDER)


COMMAND_MODULES = _command_modules()
#: Each command's line in the list of `attnbench --help` (and of its group's), as its
#: module gives it: whole, on one line of an 80-column terminal (at most SHORT_HELP_MAX
#: characters beside the longest name), where the first sentence of its help would be cut
#: with "...".
SHORT_HELP = {name: line for module in COMMAND_MODULES for name, line in module.SHORT_HELP.items()}


def _list_commands() -> None:
    """List the commands in `--help` by their modules' ORDER (a module's in the order it
    registers them; groups after commands, as typer lists them) and give every command its
    SHORT_HELP line (KeyError for a command without one)."""
    order = {name: module.ORDER for module in COMMAND_MODULES for name in module.SHORT_HELP}
    app.registered_commands.sort(key=lambda info: order[info.name])
    app.registered_groups.sort(key=lambda group: order[group.name])
    for info in app.registered_commands:
        info.short_help = SHORT_HELP[info.name]
    for group in app.registered_groups:
        group.short_help = SHORT_HELP[group.name]
        for info in group.typer_instance.registered_commands:
            info.short_help = SHORT_HELP[f"{group.name} {info.name}"]


_list_commands()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # while the commands are built, before any of them runs
        print("error: interrupted before anything ran", file=sys.stderr)
        sys.exit(130)
