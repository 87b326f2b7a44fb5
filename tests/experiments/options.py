"""Typed section options for points run outside a study, over the schema's defaults, and
decode points that carry them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from attnbench.experiments.decode import DecodeOptions, DecodePoint
from attnbench.study.schema import FIELDS, fields_for
from attnbench.study.sections import KINDS


def decode_options(
    given: dict[str, Any] | None = None, device: torch.device | str = "cpu"
) -> DecodeOptions:
    """A decode section's options: `given` over the schema's defaults on `device`, typed
    as a study types them (SectionKind.options)."""
    scalars = [n for n in fields_for("decode") if not FIELDS[n].axis]
    resolved = {n: FIELDS[n].default_for("decode") for n in scalars}
    return KINDS["decode"].options({**resolved, **(given or {})}, torch.device(device))


def decode_point(**fields: Any) -> DecodePoint:
    """A decode point with the schema's default options unless `options` is given."""
    return DecodePoint(**{"options": decode_options(), **fields})


def with_options(
    point: DecodePoint, given: dict[str, Any] | None = None, device: torch.device | str = "cpu"
) -> DecodePoint:
    """`point` with the options `given` over the schema's defaults on `device`."""
    return replace(point, options=decode_options(given, device))
