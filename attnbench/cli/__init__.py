"""The `attnbench` command line: parses flags, calls the library, renders results."""

from __future__ import annotations

from typing import Any

#: Each command's line in the list of `attnbench --help` (and of its group's): whole, on
#: one line of an 80-column terminal (at most SHORT_HELP_MAX characters beside the
#: longest name), where the first sentence of its help would be cut with "...".
SHORT_HELP = {
    "run": "Run a sweep file's sections; write results, plots, report",
    "plot": "Re-draw a study's plots from its results.json",
    "report": "Re-write a study's report.md from its results.json",
    "merge": "Put the shares of a sharded study back together",
    "params": "Parameter counts per variant: one layer, and the whole model",
    "kvmem": "KV-cache bytes per token, per layer and per model, measured",
    "decode-speed": "Prefill and decode-step latency, with and without the cache",
    "compare": "Gate results against a baseline: exit 1 on a regression",
    "fit": "The largest batch or longest context that fits in memory",
    "predict": "Prefill and decode times on a named GPU, from a roofline",
    "models": "List the model presets: attention shapes and sources",
    "env": "Print the environment recorded with every result",
    "selfcheck": "Check backends, cached decode and KV-cache sizes on a device",
    "ab": "Gate two revisions by timing them in turn, in one job",
    "baseline": "Keep the results `attnbench compare` gates against",
    "baseline save": "Validate a results file and save it as a baseline",
    "baseline exact": "Write a study's exact metrics as a baseline (what CI gates)",
    "history": "Store runs; show trends and changes over commits",
    "history add": "Store results files with their commit",
    "history show": "A metric over commits, as tables",
    "history plot": "Draw a metric over commits, its change points marked",
    "history changes": "The commits where a metric changed",
}
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


from .group import app  # noqa: E402,I001  (the commands below register on it)

# Each module registers its commands on `app`; `--help` lists them in this order.
from . import run_cmd  # noqa: E402,F401,I001  (first: the main job)
from . import params_cmd, kvmem_cmd, decode_cmd, compare_cmd, fit_cmd, predict_cmd, info_cmd  # noqa: E402,F401,I001
from . import ab_cmd  # noqa: E402,F401,I001
from . import history_cmd  # noqa: E402,F401,I001


def _short_helps() -> None:
    """Give every command its SHORT_HELP line (KeyError for a command without one)."""
    for info in app.registered_commands:
        info.short_help = SHORT_HELP[info.name]
    for group in app.registered_groups:
        group.short_help = SHORT_HELP[group.name]
        for info in group.typer_instance.registered_commands:
            info.short_help = SHORT_HELP[f"{group.name} {info.name}"]


_short_helps()


def main() -> None:
    app()
