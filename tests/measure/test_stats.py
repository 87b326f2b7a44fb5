"""What a measurement is (measure.stats): one percentile and one median, the bootstrap's
vectorised forms of them, and a summary from the samples or as a record states it."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.measure.stats import (
    Measurement,
    Summary,
    bootstrap_bounds,
    bootstrap_medians,
    median,
    percentile,
)


def test_one_percentile_and_one_median_the_definition_numpy_and_the_bootstrap_share():
    """percentile is numpy's linear method, median its 50th; the bootstrap's vectorised
    forms take the same definition, row by row and over the resampled estimates."""
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 10, 31):
        values = rng.lognormal(0.0, 0.3, n).tolist()
        for q in (0, 2.5, 25, 50, 75, 97.5, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
        assert median(values) == percentile(values, 50)
        assert median(values) == pytest.approx(float(np.median(values)))
    x = np.sort(rng.lognormal(0.0, 0.3, 12))
    idx = np.sort(np.random.default_rng(2).integers(0, x.size, size=(50, x.size)), axis=1)
    rows = bootstrap_medians(x, np.random.default_rng(2), 50)
    assert rows.tolist() == pytest.approx([median(x[i].tolist()) for i in idx])
    lo, hi = bootstrap_bounds(rows, 0.025, 0.975)
    assert (lo, hi) == pytest.approx(
        (percentile(rows.tolist(), 2.5), percentile(rows.tolist(), 97.5))
    )
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_a_measurement_summarises_its_samples_with_its_interval():
    m = Measurement.of_samples([4.0, 1.0, 3.0, 2.0, 5.0])
    assert m == Measurement([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (m.median_ms, m.p25_ms, m.p75_ms) == (3.0, 2.0, 4.0)
    assert m.rel_iqr == pytest.approx(2 / 3) and m.interval == (1.0, 5.0)
    assert m.ci_rel == pytest.approx(2 / 3) and m.stop_reason == "repeats"


def test_a_measurement_read_from_a_record_keeps_what_the_record_states():
    """The record's own median and quartiles, not ones from its samples; a record without
    quartiles spreads as its samples do, one with neither not at all."""
    roles = {"p25": "t_p25", "p75": "t_p75", "samples": "t_samples"}
    record = {"t_median": 2.5, "t_p25": 2.0, "t_p75": 3.5, "t_samples": [1.0, 2.0, 3.0, 4.0]}
    m = Measurement.of_record(record, "t_median", roles)
    assert m == Measurement([1.0, 2.0, 3.0, 4.0], recorded=Summary(2.5, 2.0, 3.5))
    assert (m.median_ms, m.p25_ms, m.p75_ms) == (2.5, 2.0, 3.5)
    assert m.rel_iqr == pytest.approx(1.5 / 2.5)
    no_quartiles = Measurement.of_record({**record, "t_p25": None}, "t_median", roles)
    assert no_quartiles.p25_ms is None
    assert no_quartiles.rel_iqr == pytest.approx((3.25 - 1.75) / 2.5)  # from the samples
    bare = Measurement.of_record({"t_median": 2.5}, "t_median", roles)
    assert (bare.samples_ms, bare.p75_ms, bare.rel_iqr) == ([], None, 0.0)
