"""Nothing already written is lost: report.md, a study's plots and the history plot are
replaced through a temporary file beside them (study.output.replace_with), so a write that
fails midway (a full disk, a drawing error, Ctrl-C) leaves the previous file whole and no
temporary file behind, and a write that succeeds writes what it wrote before."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import matplotlib
import pytest
from matplotlib.figure import Figure

from attnbench.render import history, plots, report

OLD = b"the previous file, whole\n"
PNG = "decode_latency.png"

DOC = {
    "config": {"source": "toy.yaml", "file_text": "toy: {}"},
    "environment": {"device": "cpu"},
    "created": "2026-01-01T00:00:00+00:00",
    "attnbench_version": "0",
    "sections": {},
}


def enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


#: What a failure midway raises: a full disk, a matplotlib error, Ctrl-C.
FAILURES = [enospc, lambda: ValueError("cannot draw this"), KeyboardInterrupt]
FAILURE_IDS = ["disk-full", "drawing-error", "ctrl-c"]


def small_figure() -> Figure:
    fig = Figure(figsize=(2, 1.5))
    fig.add_subplot().plot([1, 2, 3], [3, 1, 2])
    return fig


def savefig_failing(monkeypatch, failure) -> None:
    """Figure.savefig writes part of a picture, wherever it is given to write, then fails."""

    def savefig(self, fname, **kwargs):
        if isinstance(fname, (str, os.PathLike)):
            with open(fname, "wb") as fh:
                fh.write(b"\x89PNG\r\n\x1a\n half a picture")
        else:
            fname.write(b"\x89PNG\r\n\x1a\n half a picture")
        raise failure()

    monkeypatch.setattr(Figure, "savefig", savefig)


def reference_bytes(tmp_path: Path, name: str) -> bytes:
    """What savefig writes straight to a file of that name: the output before the fix."""
    ref = tmp_path / "reference" / name
    ref.parent.mkdir()
    small_figure().savefig(ref, dpi=120, format=ref.suffix.lstrip("."))
    return ref.read_bytes()


@pytest.fixture
def one_plot(monkeypatch):
    """The study plots reduced to one small figure (render_plots' writing is what is tested)."""
    monkeypatch.setattr(plots, "PLOTS", {PNG: ("A caption", lambda doc: small_figure())})


@pytest.fixture
def small_trend(monkeypatch):
    """The history's trend figure reduced to a small one; SVG and PDF made reproducible."""
    monkeypatch.setattr(history, "_trend_figure", lambda series, changes, choose="": small_figure())
    monkeypatch.setitem(matplotlib.rcParams, "svg.hashsalt", "attnbench")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")


# ------------------------------------------------------------------ report.md


def test_a_report_that_fails_midway_leaves_the_old_one_whole(tmp_path, monkeypatch):
    """Text the file cannot take (its encoding fails once the file is open)."""
    path = tmp_path / "report.md"
    path.write_bytes(OLD)
    monkeypatch.setattr(report, "render_report", lambda doc, plots: "# new\n\ud800")
    with pytest.raises(UnicodeEncodeError):
        report.write_report(DOC, tmp_path)
    assert path.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_report_on_a_full_disk_leaves_the_old_one_whole_and_is_named(tmp_path, monkeypatch):
    path = tmp_path / "report.md"
    path.write_bytes(OLD)

    def full(fd):
        raise enospc()

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as caught:
        report.write_report(DOC, tmp_path)
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(path)
    assert path.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_report_written_is_the_rendered_text_keeping_mode_and_symlink(tmp_path):
    (tmp_path / PNG).write_bytes(b"\x89PNG\r\n\x1a\n")
    real = tmp_path / "real.md"
    real.write_bytes(OLD)
    real.chmod(0o640)
    (tmp_path / "report.md").symlink_to(real)
    path = report.write_report(DOC, tmp_path)
    assert path == tmp_path / "report.md"
    assert path.read_bytes() == report.render_report(DOC, [PNG]).encode("utf-8")
    assert path.is_symlink() and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == [PNG, "real.md", "report.md"]


# ------------------------------------------------------------------ the study's plots


@pytest.mark.usefixtures("one_plot")
@pytest.mark.parametrize("failure", FAILURES, ids=FAILURE_IDS)
def test_a_plot_that_fails_midway_leaves_the_old_one_whole(tmp_path, monkeypatch, failure):
    (tmp_path / PNG).write_bytes(OLD)
    savefig_failing(monkeypatch, failure)
    with pytest.raises((OSError, ValueError, KeyboardInterrupt)) as caught:
        plots.render_plots(DOC, tmp_path)
    if isinstance(caught.value, OSError):
        assert caught.value.filename == str(tmp_path / PNG)
    assert (tmp_path / PNG).read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == [PNG]


@pytest.mark.usefixtures("one_plot")
def test_a_plot_written_is_what_savefig_draws(tmp_path):
    out = tmp_path / "plots"
    out.mkdir()
    (out / PNG).write_bytes(OLD)
    assert plots.render_plots(DOC, out) == [out / PNG]
    assert (out / PNG).read_bytes() == reference_bytes(tmp_path, PNG)
    assert sorted(p.name for p in out.iterdir()) == [PNG]


# ------------------------------------------------------------------ the history plot


@pytest.mark.usefixtures("small_trend")
@pytest.mark.parametrize("failure", FAILURES, ids=FAILURE_IDS)
def test_a_history_plot_that_fails_midway_leaves_the_old_one_whole(tmp_path, monkeypatch, failure):
    out = tmp_path / "trend.svg"
    out.write_bytes(OLD)
    savefig_failing(monkeypatch, failure)
    with pytest.raises((OSError, ValueError, KeyboardInterrupt)) as caught:
        history.plot_series([], [], out)
    if isinstance(caught.value, OSError):
        assert caught.value.filename == str(out)
    assert out.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trend.svg"]


@pytest.mark.usefixtures("small_trend")
@pytest.mark.parametrize("name", ["trend.png", "trend.svg", "trend.PDF"])
def test_a_history_plot_written_is_what_savefig_draws_in_the_format_named(tmp_path, name):
    out = tmp_path / "out" / name  # its folder made
    assert history.plot_series([], [], out) == out
    assert out.read_bytes() == reference_bytes(tmp_path, name.lower())
    assert sorted(p.name for p in out.parent.iterdir()) == [name]
