"""Typed section options for points run outside a study, over the schema's defaults, and
decode points that carry them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from attnbench.experiments.decode import DecodeOptions, DecodePoint
from attnbench.study.sections import section_options


def decode_options(
    given: dict[str, Any] | None = None, device: torch.device | str = "cpu"
) -> DecodeOptions:
    """A decode section's options: `given` over the schema's defaults on `device`."""
    return section_options("decode", given, torch.device(device))


def decode_point(**fields: Any) -> DecodePoint:
    """A decode point with the schema's default options unless `options` is given."""
    return DecodePoint(**{"options": decode_options(), **fields})


def with_options(
    point: DecodePoint, given: dict[str, Any] | None = None, device: torch.device | str = "cpu"
) -> DecodePoint:
    """`point` with the options `given` over the schema's defaults on `device`."""
    return replace(point, options=decode_options(given, device))
