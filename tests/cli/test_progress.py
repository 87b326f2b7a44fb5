"""A run's progress: a run estimated over a minute says its estimate before it starts."""

from __future__ import annotations

from attnbench.cli import common
from attnbench.cli.common import LONG_RUN_S, progress_iter


def said(capsys, items, weight, quiet=False) -> str:
    assert list(progress_iter(items, str, quiet, weight=weight)) == items
    return capsys.readouterr().out


def test_a_long_run_says_its_estimate_first(capsys, monkeypatch):
    monkeypatch.setattr(common.console, "width", 200)
    out = said(capsys, [1, 2, 3], lambda _: LONG_RUN_S / 2)
    assert out.splitlines()[0] == "3 points to run, about 90 s (a rough estimate)"


def test_a_short_quiet_or_unweighted_run_does_not(capsys):
    assert "estimate" not in said(capsys, [1, 2], lambda _: LONG_RUN_S / 4)
    assert said(capsys, [1, 2], lambda _: LONG_RUN_S, quiet=True) == ""
    assert "estimate" not in said(capsys, list(range(100)), None)
