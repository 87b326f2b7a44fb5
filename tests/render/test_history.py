"""The history's series and changes as text."""

from __future__ import annotations

from attnbench.history.series import ANY_ENVIRONMENT, Change, CommitValue, Series
from attnbench.history.store import Commit, environment_id
from attnbench.render.history import environment_label


def test_an_environment_is_labelled_with_what_it_recorded():
    env = {"device_name": "NVIDIA H100", "torch_version": "2.4.0", "num_threads": 8}
    series = Series("step_ms_median", "timing", "decode", "0123456789", env, {})
    assert (
        environment_label(series) == "environment 0123456789 (NVIDIA H100, torch 2.4.0, 8 threads)"
    )
    one = Series("step_ms_median", "timing", "decode", "0123456789", {"num_threads": 1}, {})
    assert environment_label(one) == "environment 0123456789 (1 thread)"


def test_an_environment_not_recorded_is_not_labelled_with_nones():
    series = Series("step_ms_median", "timing", "decode", environment_id({}), {}, {})
    label = environment_label(series)
    assert label.endswith("(not recorded)") and "None" not in label


def test_an_exact_metrics_series_is_of_every_environment():
    series = Series("kv_bytes", "exact", "kvmem", ANY_ENVIRONMENT, {}, {})
    assert environment_label(series) == "every environment (an exact metric)"


def stepped(n: int = 12, at: tuple[int, ...] = (6,)) -> tuple[list, list]:
    """Two series over `n` commits (MHA's steps 4x slower from commit `at[0]` on, MQA's
    1.2x), with a change of each at every commit of `at`: the demo's history
    (scripts/history_demo.py)."""
    env = {"device_name": "Some CPU", "torch_version": "2.4.0", "num_threads": 1}
    commits = [Commit(f"{i:02d}abcdef0123", "main", f"2026-01-{i + 1:02d}") for i in range(n)]
    drawn = []
    for keys, base, jump in (({"variant": "MHA"}, 8.4, 4.1), ({"variant": "MQA"}, 1.65, 1.2)):
        s = Series("step_ms_median", "timing", "decode", "0123456789", env, keys)
        for i, c in enumerate(commits):
            m = base * (jump if i >= at[0] else 1)
            s.values.append(CommitValue(c, m, m * 0.98, m * 1.02, 3))
        drawn.append(s)
    changes = [
        Change(s, commits[i], s.values[i - 1].median, s.values[i].median, 1.0)
        for s in drawn
        for i in at
    ]
    return drawn, changes


def test_the_trend_plots_change_texts_and_legend_lie_where_no_line_does():
    """A change's size is written above the panel (a line of data would strike it through
    inside), each text clear of the others; the legend is beside the panel (inside, it
    would cover the first commits)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnbench.render.history import _trend_figure

    fig = _trend_figure(*stepped(at=(6, 7, 9)))
    fig.draw(FigureCanvasAgg(fig).get_renderer())
    (ax,) = fig.axes
    panel = ax.get_window_extent()
    texts = [t.get_window_extent() for t in ax.texts]
    assert [t.get_text() for t in ax.texts] == [
        f"+1.0%..+1.0% (2 series) at {i:02d}abcde" for i in (6, 7, 9)
    ]
    assert all(box.y0 >= panel.y1 for box in texts)  # above the data
    assert all(box.y1 <= ax.title.get_window_extent().y0 for box in texts)  # under the title
    assert not any(a.overlaps(b) for i, a in enumerate(texts) for b in texts[i + 1 :])
    assert ax.get_legend().get_window_extent().x0 > panel.x1
    assert ax.get_legend().get_window_extent().x1 <= fig.bbox.x1


def many(count: int, spread: float) -> list:
    """`count` series over 4 commits, the i-th's steps at (1 + i) ** spread ms."""
    env = {"device_name": "Some CPU, with a long name", "torch_version": "2.4.0"}
    commits = [Commit(f"{i:02d}abcdef0123", "main", f"2026-01-{i + 1:02d}") for i in range(4)]
    drawn = []
    for i in range(count):
        s = Series("step_ms_median", "timing", "decode", "0123456789", env, {"prompt_len": i})
        m = (1 + i) ** spread
        s.values = [CommitValue(c, m, m * 0.98, m * 1.02, 3) for c in commits]
        drawn.append(s)
    return drawn


def test_a_panel_draws_each_series_apart_says_how_many_it_left_out_and_scales_to_them():
    """Up to MAX_LINES series, each of its own colour and marker, a log axis where they
    span a decade (MQA's steps under MHA's would lie flat on a linear one), the title
    whole inside the figure and, where series were left out, how many."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnbench.render.history import MAX_LINES, _trend_figure

    fig = _trend_figure(many(MAX_LINES + 5, spread=1.0), [], choose="choose with --where")
    fig.draw(FigureCanvasAgg(fig).get_renderer())
    (ax,) = fig.axes
    assert len(ax.lines) == MAX_LINES
    styles = {(line.get_color(), line.get_marker()) for line in ax.lines}
    assert len(styles) == MAX_LINES
    assert ax.get_yscale() == "log"
    title = ax.title.get_window_extent()
    assert title.x0 >= 0 and title.x1 <= fig.bbox.x1  # not cut at the figure's edges
    assert ax.title.get_text().endswith(
        f"{MAX_LINES} of {MAX_LINES + 5} series drawn: choose with --where"
    )
    legend = ax.get_legend().get_window_extent()
    assert legend.y0 >= 0 and legend.y1 <= fig.bbox.y1  # every entry inside the figure
    fig = _trend_figure(many(3, spread=0.5), [])  # 1 to 1.7 ms: a linear axis from 0
    (ax,) = fig.axes
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    assert "drawn" not in ax.title.get_text() and len(ax.lines) == 3
