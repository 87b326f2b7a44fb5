"""Typed section options for points run outside a study, over the schema's defaults."""

from __future__ import annotations

from typing import Any

import torch

from attnbench.experiments.decode import DecodeOptions
from attnbench.study.sections import section_options


def decode_options(
    given: dict[str, Any] | None = None, device: torch.device | str = "cpu"
) -> DecodeOptions:
    """A decode section's options: `given` over the schema's defaults on `device`."""
    return section_options("decode", given, torch.device(device))
