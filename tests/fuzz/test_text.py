"""Property-based fuzzing of user text on its way out: a model's name (a config.json's
`_name_or_path`) is printed in tables as written (never rich markup or an emoji code),
drawn in plots as written (never mathtext), and escaped in report.md so that Markdown
shows it as written."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.cli import app
from attnbench.render.plots import render_plots
from attnbench.render.report import render_report
from attnbench.render.table import markdown_text
from tests.fuzz.test_flags import LLAMA, invoke, runner

#: Names built from what rich, matplotlib and Markdown read as markup.
MARKUP_PIECES = [
    "[",
    "]",
    "[/]",
    "[bold]",
    "[link=x]",
    ":x:",
    ":smile:",
    "$",
    "$x^2$",
    "\\frac{",
    "\\",
    "*",
    "_",
    "`",
    "|",
    "<b>",
    "&amp;",
    "~~",
    "#",
    "a",
]
names = st.one_of(
    st.lists(st.sampled_from(MARKUP_PIECES), min_size=1, max_size=8).map("".join),
    st.text(min_size=1, max_size=30),
)
#: Fewer examples than the other properties: each one draws a plot.
PLOT_EXAMPLES = max(10, settings.default.max_examples // 10)


def _squeezed(text: str) -> str:
    return "".join(text.split())


@given(names)
def test_a_model_name_is_printed_as_written(tmp_path_factory, name):
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps({**LLAMA, "_name_or_path": name}))
    result = invoke(["kvmem", "--hf-config", str(path), "--no-measure"], "kvmem")
    if result.exit_code == 0 and name.isprintable() and name.strip():
        assert _squeezed(name) in _squeezed(result.stdout), (name, result.stdout)


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """A finished study of one config.json's KV cache at two contexts."""
    tmp = tmp_path_factory.mktemp("study")
    (tmp / "config.json").write_text(json.dumps(LLAMA))
    (tmp / "study.yaml").write_text("models: [config.json]\nkvmem:\n  seq_len: [512, 1024]\n")
    result = runner.invoke(app, ["run", str(tmp / "study.yaml"), "--out", str(tmp / "out"), "-q"])
    assert result.exit_code == 0, result.output
    return json.loads((tmp / "out" / "results.json").read_text())


@pytest.mark.filterwarnings("ignore:Glyph")  # a control character has no glyph to draw
@settings(max_examples=PLOT_EXAMPLES)
@given(names)
def test_a_model_name_in_plots_and_report(tmp_path_factory, study, name):
    doc = json.loads(json.dumps(study))
    for record in doc["sections"]["kvmem"]["records"]:
        record["model"] = name
    plots = render_plots(doc, tmp_path_factory.mktemp("plots"))
    assert [p.name for p in plots] == ["kv_memory_context.png"]
    report = render_report(doc, [p.name for p in plots])
    if name.isprintable():
        assert markdown_text(name) in report
