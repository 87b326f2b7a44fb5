"""The words of the KV-memory plots: legends that name a cache's dtype as a reader says it
(and no unset option), lines named by their models, KV-head ticks that cannot be misread,
and subtitles that fit the figure."""

from __future__ import annotations

import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg

from attnbench.render import plots
from attnbench.study.runner import plan_study, run_study

#: One model with three KV-head counts (its own 8 and two what-ifs) and two cache dtypes.
DTYPES = """\
kvmem:
  models: [llama-3-8b]
  num_kv_heads: [32, 8, 1]
  kv_dtype: [float16, int8]
  seq_len: [1024, 4096, 8192]
  measure: false
"""
#: The default study's kvmem: a shape of 8 query heads (8 KV heads is its MHA) beside two
#: presets of 32 (8 KV heads is llama-3-8b's GQA-8).
PRESETS = """\
defaults: {d_model: 512, num_heads: 8}
sweep: {num_kv_heads: [8, 2, 1]}
models: [llama-2-7b, llama-3-8b]
kvmem: {num_layers: 32, batch: 1, seq_len: [1024, 4096], dtype: float16, measure: false}
"""


def study(tmp_path_factory, text: str) -> dict:
    """The results document of a sweep file `text`."""
    out = tmp_path_factory.mktemp("study")
    (out / "study.yaml").write_text(text)
    return run_study(plan_study(out / "study.yaml")).document


@pytest.fixture(scope="module")
def dtypes(tmp_path_factory) -> dict:
    return study(tmp_path_factory, DTYPES)


@pytest.fixture(scope="module")
def presets(tmp_path_factory) -> dict:
    return study(tmp_path_factory, PRESETS)


def legend(ax: Axes) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def ticks(ax: Axes) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def test_a_legend_names_the_cache_dtype_and_leaves_out_an_unset_option(dtypes):
    heads = plots.kv_memory_vs_heads(dtypes).axes[0]
    assert legend(heads) == ["llama-3-8b, KV float16", "llama-3-8b, KV int8, scales float16"]
    one = [r for r in dtypes["sections"]["kvmem"]["records"] if r["num_kv_heads"] == 8]
    lengths = plots.kv_memory_vs_context({**dtypes, "sections": {"kvmem": {"records": one}}})
    assert legend(lengths.axes[0]) == [
        "llama-3-8b (GQA-8), KV float16",
        "llama-3-8b (GQA-8), KV int8, scales float16",
    ]


def test_the_context_plot_names_the_cache_dtype_not_the_model_dtype(dtypes):
    """llama-3-8b is bfloat16; its caches here are float16 and int8."""
    subtitle = plots.kv_memory_vs_context(dtypes).axes[0].get_title()
    assert subtitle.splitlines()[0] == "layers 32, batch 1"
    int8 = [r for r in dtypes["sections"]["kvmem"]["records"] if r["kv_dtype"] == "int8"]
    doc = {**dtypes, "sections": {"kvmem": {"records": int8}}}
    subtitle = plots.kv_memory_vs_context(doc).axes[0].get_title()
    assert subtitle.splitlines()[0] == "layers 32, KV int8, scales float16, batch 1"
    assert "bfloat16" not in subtitle


def test_kv_head_ticks_are_counts_when_lines_call_a_count_differently(presets):
    """8 KV heads is MHA for the shape of 8 query heads, GQA-8 for llama-3-8b."""
    ax = plots.kv_memory_vs_heads(presets).axes[0]
    assert ticks(ax) == ["1", "2", "8", "32"]
    # a line of the presets' shape: llama-3-8b's 8 KV heads, then llama-2-7b's 32
    assert legend(ax) == ["query heads 8, head_dim 64", "llama-3-8b and llama-2-7b"]


def test_kv_head_ticks_name_the_variant_when_lines_agree(dtypes):
    ax = plots.kv_memory_vs_heads(dtypes).axes[0]
    assert ticks(ax) == ["1\nMQA", "8\nGQA-8", "32\nMHA"]


def test_a_long_subtitle_is_wrapped_to_fit_the_figure(dtypes):
    fig = plots.kv_memory_vs_heads(dtypes)
    title = fig.axes[0].title
    lines = title.get_text().splitlines()
    assert max(map(len, lines)) <= plots.SUBTITLE_WIDTH and len(lines) == 3
    assert " ".join(lines[:2]).endswith("(the longest; the bytes grow in proportion to it)")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    box = title.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1


def test_every_subtitle_is_wrapped_line_by_line():
    """_figure makes every plot with a subtitle: each of its lines is wrapped alone."""
    subtitle = "on a machine\n" + " ".join(["a setting"] * 40)
    _, ax = plots._figure("Title", subtitle, "x", "y")
    lines = ax.get_title().splitlines()
    assert lines[0] == "on a machine" and len(lines) > 3
    assert max(map(len, lines)) <= plots.SUBTITLE_WIDTH
    assert " ".join(lines[1:]) == " ".join(["a setting"] * 40)
