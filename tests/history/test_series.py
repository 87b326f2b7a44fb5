"""A metric's history as series, and which of them are searched for changes."""

from __future__ import annotations

import pytest

from attnbench.errors import FieldError
from attnbench.history.series import (
    ANY_ENVIRONMENT,
    CommitValue,
    Series,
    by_environment,
    find_changes,
    followed,
    search_changes,
)
from attnbench.history.store import Commit, open_history


def series(environment_id: str, kind: str = "timing", medians: tuple = ()) -> Series:
    found = Series("m", kind, "decode", environment_id, {}, {"variant": environment_id})
    found.values = [CommitValue(Commit(f"{i:040d}"), m, m, m, 1) for i, m in enumerate(medians)]
    return found


def test_series_are_grouped_by_environment_in_the_order_they_come():
    a1, b1, a2 = series("a"), series("b"), series("a")
    grouped = by_environment([a1, b1, a2])
    assert list(grouped) == ["a", "b"]
    assert grouped["a"] == [a1, a2] and grouped["b"][0] is b1
    assert by_environment([]) == {}


def test_the_gated_timings_and_every_exact_metric_are_followed():
    kinds = {
        "step_ms_median": "timing",
        "step_ms_p25": "timing",
        "kv_bytes": "exact",
        "peak_bytes": "measured",
        "flops_median": "setting",
    }
    assert followed(kinds) == ["step_ms_median", "kv_bytes"]
    assert followed({}) == []


def test_the_changes_of_every_series_in_turn():
    first = series(ANY_ENVIRONMENT, "exact", (1.0, 1.0, 2.0))
    second = series(ANY_ENVIRONMENT, "exact", (5.0, 4.0))
    found = search_changes([first, second, series("a", "measured", (1.0, 9.0))]).changes
    assert [(c.series, c.before, c.after) for c in found] == [(first, 1.0, 2.0), (second, 5.0, 4.0)]
    assert found[0].commit == first.values[2].commit


def test_a_history_holding_no_runs_has_no_changes_to_find(tmp_path):
    db = tmp_path / "h.sqlite"
    open_history(db, create=True).close()
    with pytest.raises(FieldError) as caught:
        find_changes(str(db), [], None)
    assert caught.value.field == "db"
    assert caught.value.reason == "holds no runs; add some with `attnbench history add`"
