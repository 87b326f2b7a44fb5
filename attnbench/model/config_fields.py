"""Reading the fields of a parsed config.json: each checked for its type and range, and
every problem a one-line UsageError naming the file (`where`) and the field."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError, brief, spelled
from .limits import MAX_WIDTH

#: Marks a field that has no default: a config.json must give it.
REQUIRED: Any = object()


def missing_field(key: str, where: str, why: str = "") -> UsageError:
    return UsageError(f"{where}: missing field {key!r}{why}")


def int_field(
    cfg: dict,
    key: str,
    where: str,
    default: Any = REQUIRED,
    *,
    minimum: int = 1,
    maximum: int = MAX_WIDTH,
    why: str = "",
) -> Any:
    """cfg[key] as an integer in [minimum, maximum]; `default` when it is absent or null
    (REQUIRED: an error naming the field, with `why` appended)."""
    value = cfg.get(key)
    if value is None:
        if default is REQUIRED:
            raise missing_field(key, where, why)
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise UsageError(f"{where}: field {key!r} must be {kind}, got {brief(value)}")
    if value > maximum:
        raise UsageError(f"{where}: field {key!r} must be at most {maximum:,}, got {brief(value)}")
    return value


def number_field(cfg: dict, key: str, where: str, default: float, maximum: float) -> float:
    """cfg[key] as a number in (0, maximum]; `default` when it is absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= maximum:
        raise UsageError(
            f"{where}: field {key!r} must be a number in (0, {maximum:g}], got {brief(value)}"
        )
    return value


def bool_field(cfg: dict, key: str, where: str, default: bool) -> bool:
    """cfg[key] as true or false; `default` when it is absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise UsageError(f"{where}: field {key!r} must be true or false, got {brief(value)}")
    return value


def str_field(cfg: dict, key: str, where: str) -> str | None:
    """cfg[key] as a string; None when it is absent or null."""
    value = cfg.get(key)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{where}: field {key!r} must be a string, got {brief(value)}")
    return value


def object_field(cfg: dict, key: str, where: str) -> dict | None:
    """cfg[key], a sub-config (attn_config, linear_attn_config), as an object; None when it is
    absent or null."""
    value = cfg.get(key)
    if value is not None and not isinstance(value, dict):
        raise UsageError(f"{where}: field {key!r}: expected an object, got {spelled(value)}")
    return value


def layer_indices(cfg: dict, key: str, num_layers: int, where: str) -> tuple[int, ...] | None:
    """A list of layer indices (mlp_only_layers, attn_layer_indices), each in [0,
    num_layers), sorted, each once; None when the field is left out or null."""
    listed = cfg.get(key)
    if listed is None:
        return None
    if not isinstance(listed, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in listed
    ):
        raise UsageError(
            f"{where}: field {key!r} must list layer indices from 0 to {num_layers - 1}, "
            f"got {brief(listed)}"
        )
    return tuple(sorted(set(listed)))
