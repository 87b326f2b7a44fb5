"""Read a model's architecture from a Hugging Face config.json on disk.

Understands the Llama/Mistral/Qwen/Gemma names (hidden_size, num_attention_heads,
num_key_value_heads, head_dim, num_hidden_layers), Falcon's (n_head, n_layer, multi_query,
num_kv_heads with new_decoder_architecture) and GPT-2's (n_embd, n_head, n_layer).
"""

from __future__ import annotations

import json
from pathlib import Path

from .analytic import MODEL_DTYPES, AttentionShape
from .errors import UsageError
from .presets import ModelSpec

_ALIASES = {
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "num_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
}
_DTYPE_NAMES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
                "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # fmt: skip


def _positive_int(cfg: dict, key: str, where: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
    return value


def _one_of(cfg: dict, field: str, where: str) -> int:
    """The value under any alias of `field`; aliases that disagree are an error."""
    found = {k: _positive_int(cfg, k, where) for k in _ALIASES[field] if k in cfg}
    if not found:
        names = " or ".join(repr(k) for k in _ALIASES[field])
        raise UsageError(f"{where}: missing field {names}")
    if len(set(found.values())) > 1:
        raise UsageError(f"{where}: contradictory fields {found}")
    return next(iter(found.values()))


def _kv_heads(cfg: dict, num_heads: int, where: str) -> int:
    candidates: dict[str, int] = {}
    for key in ("num_key_value_heads", "num_kv_heads", "n_head_kv"):
        if cfg.get(key) is not None:
            candidates[key] = _positive_int(cfg, key, where)
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        candidates["multi_query"] = 1
    if len(set(candidates.values())) > 1:
        raise UsageError(f"{where}: contradictory KV-head fields {candidates}")
    return next(iter(candidates.values())) if candidates else num_heads


def spec_from_hf_config(cfg: dict, name: str, where: str) -> ModelSpec:
    """A ModelSpec from a parsed config.json; `where` names the file in error messages."""
    if not isinstance(cfg, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    d_model = _one_of(cfg, "d_model", where)
    num_heads = _one_of(cfg, "num_heads", where)
    num_layers = _one_of(cfg, "num_layers", where)
    num_kv_heads = _kv_heads(cfg, num_heads, where)
    head_dim = cfg.get("head_dim")
    if head_dim is not None:
        head_dim = _positive_int(cfg, "head_dim", where)
    raw_dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    dtype = _DTYPE_NAMES.get(str(raw_dtype).replace("torch.", ""))
    if dtype is None:
        raise UsageError(
            f"{where}: field 'torch_dtype' is {raw_dtype!r}; expected one of "
            f"{', '.join(MODEL_DTYPES)}"
        )
    try:
        shape = AttentionShape(d_model, num_heads, num_kv_heads, head_dim)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    return ModelSpec(
        name=name,
        num_layers=num_layers,
        d_model=d_model,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=shape.head_dim,  # type: ignore[arg-type]
        dtype=dtype,
        source=str(where),
    )


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read config.json at `path`; every problem is a UsageError naming the file and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"--hf-config: file not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"--hf-config: cannot read {path}: {exc.strerror}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    name = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
    return spec_from_hf_config(cfg, name or path.parent.name or path.stem, str(path))
