"""Shared test setup: a fixed seed for every test, and the `cuda` marker's skip."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` when no CUDA device is available."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state."""
    torch.manual_seed(0)
    yield
