"""What a measurement is (measure.stats): one percentile and one median, the bootstrap's
vectorised forms of them, and a summary from the samples or as a record states it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnbench.measure.stats import (
    Measurement,
    Summary,
    bootstrap_bounds,
    bootstrap_interval,
    bootstrap_medians,
    layout_chunks,
    layout_modes,
    median,
    next_run_interval,
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


def test_samples_over_layouts_split_into_equal_consecutive_chunks():
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert layout_chunks(values, 3) == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert layout_chunks(values, 4) == [values]  # uneven: one layout, as an older record
    assert layout_chunks(values, 1) == [values]


def test_the_interval_over_layouts_widens_with_their_spread_and_shrinks_with_more():
    """Layouts whose medians differ widen the interval by t(L - 1) s sqrt(1 + 1/L) on the
    log scale, beyond what the pooled rounds' bootstrap would say; agreeing layouts leave
    it at sqrt(2) x the bootstrap's width; one layout is the bootstrap interval itself."""
    rng = np.random.default_rng(0)
    rounds = rng.normal(1.0, 0.01, 40).tolist()
    assert next_run_interval(rounds, 1) == bootstrap_interval(rounds)
    shifts = [0.9, 1.1, 0.95, 1.05]
    apart = [v * shifts[i // 10] for i, v in enumerate(rounds)]
    lo, hi = next_run_interval(apart, 4)
    logs = np.log([median(apart[i : i + 10]) for i in range(0, 40, 10)])
    half = 3.182 * logs.std(ddof=1) * math.sqrt(1 + 1 / 4)
    assert (lo, hi) == pytest.approx(
        (median(apart) * math.exp(-half), median(apart) * math.exp(half))
    )
    b_lo, b_hi = bootstrap_interval(apart)
    assert lo < b_lo and hi > b_hi
    more = next_run_interval(apart * 4, 16)  # the same spread over 16 layouts
    assert more[1] - more[0] < hi - lo
    c_lo, c_hi = next_run_interval(rounds, 4)  # layouts that agree
    r_lo, r_hi = bootstrap_interval(rounds)
    assert c_hi / median(rounds) >= (r_hi / median(rounds)) ** math.sqrt(2) * (1 - 1e-9)
    assert Measurement(apart, layouts=4).interval == (lo, hi)


def test_layouts_in_two_groups_are_two_modes_and_one_apart_is_not():
    tight = [1.0, 1.0, 1.01, 1.0]
    assert layout_modes(tight * 2 + [1.9] * 8, 4) == ([1.0, 1.0], [1.9, 1.9])
    assert layout_modes(tight * 3 + [1.9] * 4, 4) is None  # one layout: an outlier
    assert layout_modes(tight * 4, 4) is None
    assert layout_modes([1.0] * 4 + [1.1] * 4 + [1.05] * 8, 4) is None  # a gap under 15%


def test_the_bootstrap_over_layouts_draws_whole_layouts_first():
    """Rounds that agree within layouts that do not: resampling rounds alone says the
    median is known to a hair, resampling layouts first says how far layouts move it."""
    noise = np.random.default_rng(1).normal(1.0, 0.001, 150)
    values = [shift * noise[i] for i, shift in enumerate(np.repeat([0.8, 1.0, 1.2], 50))]
    rng = np.random.default_rng(0)
    rounds = bootstrap_medians(values, rng, 2000)
    layouts = bootstrap_medians(values, rng, 2000, 3)
    assert np.ptp(layouts) > 0.3 and np.std(layouts) > 10 * np.std(rounds)
