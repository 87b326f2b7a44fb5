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
    # a line of the presets' shape: llama-3-8b's 8 KV heads, then llama-2-7b's 32, named
    # by the shape they share as the other line is (which tells why it lies higher)
    assert legend(ax) == [
        "query heads 8, head_dim 64",
        "llama-3-8b and llama-2-7b,\nquery heads 32, head_dim 128",
    ]


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


def test_a_wrapped_subtitle_leaves_no_word_alone_on_a_line(presets):
    """'layers 32, ..., context 4,096 (the longest; the bytes grow in proportion to it)'
    wrapped into lines of even lengths, breaking after a comma where it can: not a full
    line and 'to it)'."""
    title = plots.kv_memory_vs_heads(presets).axes[0].get_title()
    settings = title.splitlines()[:-1]  # the last: where the bytes come from
    assert settings == [
        "layers 32, KV float16, batch 1,",
        "context 4,096 (the longest; the bytes grow in proportion to it)",
    ]
    lines = plots.wrapped("a b " * 60, plots.SUBTITLE_WIDTH).splitlines()
    assert len(lines) == 3 and min(map(len, lines)) >= max(map(len, lines)) - 4
    assert plots.wrapped("llama-3-8b " * 12, 40).splitlines()[0].endswith("llama-3-8b")


def test_every_subtitle_is_wrapped_line_by_line():
    """_figure makes every plot with a subtitle: each of its lines is wrapped alone."""
    subtitle = "on a machine\n" + " ".join(["a setting"] * 40)
    _, ax = plots._figure("Title", subtitle, "x", "y")
    lines = ax.get_title().splitlines()
    assert lines[0] == "on a machine" and len(lines) > 3
    assert max(map(len, lines)) <= plots.SUBTITLE_WIDTH
    assert " ".join(lines[1:]) == " ".join(["a setting"] * 40)


#: The presets of configs/models.yaml: two pairs of them hold caches of the same bytes
#: (llama-2-70b and llama-3-70b; llama-3-8b and mixtral-8x7b), and eleven lines would
#: outnumber the ten colours.
MODELS = """\
models: [llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, llama-3-70b, mistral-7b,
         mixtral-8x7b, falcon-7b, qwen2.5-7b, gemma-7b, gpt3-175b]
kvmem: {batch: [1], seq_len: [2048, 8192, 32768], measure: false}
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    return study(tmp_path_factory, MODELS)


def drawn(fig) -> None:
    fig.draw(FigureCanvasAgg(fig).get_renderer())


def test_a_legend_of_many_series_sits_beside_the_axes(models):
    fig = plots.kv_memory_vs_context(models)
    ax = fig.axes[0]
    drawn(fig)
    assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1
    assert ax.get_legend().get_window_extent().x1 <= fig.bbox.x1


def test_series_of_identical_points_are_one_line_named_by_each(models):
    """11 presets, 9 lines: every legend entry names a line that can be seen, and every
    model is named."""
    ax = plots.kv_memory_vs_context(models).axes[0]
    labels = legend(ax)
    assert len(labels) == len(ax.get_lines()) == 9
    assert (
        "llama-2-70b (GQA-8), float16, KV float16\n= llama-3-70b (GQA-8), bfloat16, KV bfloat16"
        in labels
    )
    assert "llama-3-8b (GQA-8)\n= mixtral-8x7b (GQA-8), bfloat16, KV bfloat16" in labels
    for model in yaml_models(MODELS):
        assert sum(f"{model} (" in label for label in labels) == 1, model
    points = [
        tuple(zip(line.get_xdata(), line.get_ydata(), strict=True)) for line in ax.get_lines()
    ]
    assert len(set(points)) == len(points)  # no line hidden under another


def yaml_models(text: str) -> list[str]:
    words = text.split("[", 1)[1].split("]", 1)[0]
    return [w.strip() for w in words.replace("\n", " ").split(",")]


def test_series_beyond_the_colours_differ_by_marker():
    """12 shapes: colours come round again, a colour and a marker never."""
    rows = [
        {
            "variant": "MHA",
            "num_heads": 8,
            "num_kv_heads": 8,
            "head_dim": 64,
            "num_layers": layers,
            "seq_len": s,
            "kv_bytes": 1024 * layers * s,
            "status": "ok",
        }
        for layers in range(1, 13)
        for s in (8, 64)
    ]
    doc = {"environment": {"device": "cpu"}, "sections": {"kvmem": {"records": rows}}}
    lines = plots.kv_memory_vs_context(doc).axes[0].get_lines()
    assert len(lines) == 12
    colours = [line.get_color() for line in lines]
    assert len(set(colours)) == 10  # the cycle of ten, twice over for two of them
    styles = {(line.get_color(), line.get_marker()) for line in lines}
    assert len(styles) == 12
