"""The history's series and changes as text."""

from __future__ import annotations

from attnbench.history.series import ANY_ENVIRONMENT, Series
from attnbench.history.store import environment_id
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
