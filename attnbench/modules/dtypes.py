"""The torch dtype behind each dtype name of model/dtypes.py."""

from __future__ import annotations

import torch

from ..model.dtypes import DTYPES, MODEL_DTYPES, check_dtype


def storage_dtype(name: str) -> torch.dtype:
    """The torch dtype that holds values of the dtype called `name` (int4: uint8)."""
    return getattr(torch, DTYPES[name].storage)


def torch_dtype(name: str, field: str = "dtype") -> torch.dtype:
    """The torch dtype of a model dtype (float32, float16, bfloat16)."""
    return storage_dtype(check_dtype(name, field, MODEL_DTYPES))
