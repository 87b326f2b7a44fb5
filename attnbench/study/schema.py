"""The sweep schema: every field a study (a sweep file, or a command's flags) can set.

Each field is declared once, here: its type, the sections that use it, whether a list of
values is an axis of the grid, its default per section, its limits and its help. The
sweep files, the command-line flags generated from it, the typed points and the docs
all read it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model.capacity import MAX_SEQUENCES
from ..model.dtypes import KV_DTYPES, MODEL_DTYPES, SCALE_DTYPES
from ..modules.attention import BACKENDS

#: Sections a sweep file may hold besides defaults, sweep and models; `run` runs these.
SECTIONS = ("params", "kvmem", "decode", "fit")
#: Sections `run` runs when the file names none.
DEFAULT_SECTIONS = ("params", "kvmem", "decode")
FILE_KEYS = ("defaults", "sweep", "models", *SECTIONS)

SHAPE_FIELDS = ("d_model", "num_heads", "num_kv_heads", "head_dim")
_SHAPE = ("params", "kvmem", "decode")
_CACHE = ("kvmem", "fit")
_UNSET = object()

# Upper bounds of the integer fields: far above any real model or run, low enough that no
# size computed from them overflows a tensor's 64-bit element count or takes a list per
# unit (a layer, a token) that cannot be held.
MAX_WIDTH = 2**20  # d_model
MAX_HEADS = 2**16  # num_heads, num_kv_heads, head_dim
MAX_LAYERS = 100_000
MAX_TOKENS = 10**9  # batch, seq_len, prompt_len; windows, pages and scale groups
MAX_GEN_LEN = 1_000_000  # decode steps run one by one
MAX_REPEATS = 10_000  # warmup, repeats
MAX_GPUS = 1_000_000  # tp, gpus
#: CPU threads a decode may use, per CPU of this machine.
THREADS_PER_CPU = 4


def max_threads() -> int:
    """The most intra-op threads a decode may ask for: THREADS_PER_CPU per CPU here."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


@dataclass(frozen=True)
class Field:
    """One field. `default` is one value for every section or a {section: value} map."""

    type: type
    sections: tuple[str, ...]
    help: str
    axis: bool = True
    choices: tuple[str, ...] | None = None
    minimum: int | None = 1
    #: The largest value (integers), or a function giving it on this machine.
    maximum: int | Callable[[], int] | None = None
    default: Any = None

    @property
    def upper(self) -> int | None:
        """The largest value allowed here, or None."""
        return self.maximum() if callable(self.maximum) else self.maximum

    def help_text(self) -> str:
        """The help, with the largest value when there is one: 'Tokens (at most 10).',
        'Heads (default 1; at most 10).'"""
        if self.upper is None:
            return self.help
        text = self.help.rstrip(".")
        if text.endswith(")") and text[text.rfind("(") :].startswith("(default"):
            return f"{text[:-1]}; at most {self.upper})."
        return f"{text} (at most {self.upper})."

    def default_for(self, section: str) -> Any:
        if isinstance(self.default, Mapping):
            return self.default.get(section)
        return self.default


FIELDS: dict[str, Field] = {
    "d_model": Field(int, _SHAPE, "Model width, e.g. 4096.", maximum=MAX_WIDTH),
    "num_heads": Field(int, _SHAPE, "Query heads, e.g. 32.", maximum=MAX_HEADS),
    "num_kv_heads": Field(
        int,
        _SHAPE,
        "KV heads, comma-separated: 32,8,4,1 (default: one per query head).",
        maximum=MAX_HEADS,
    ),
    "head_dim": Field(int, _SHAPE, "Head dimension (default d_model / heads).", maximum=MAX_HEADS),
    "bias": Field(bool, ("params", "decode"), "Projections with bias.", default=False),
    "num_layers": Field(
        int,
        ("kvmem",),
        "Layers (default: the model's, else 1).",
        maximum=MAX_LAYERS,
        default=1,
    ),
    "batch": Field(
        int,
        ("kvmem", "decode", "fit"),
        "Batch sizes, comma-separated (fit: the longest context at this batch).",
        maximum=MAX_TOKENS,
        default={"kvmem": 1, "decode": 1},
    ),
    "seq_len": Field(
        int,
        _CACHE,
        "Cached tokens, comma-separated (fit: the largest batch at this context).",
        maximum=MAX_TOKENS,
        default={"kvmem": 2048},
    ),
    "dtype": Field(
        str,
        ("kvmem", "decode"),
        "float32, float16 or bfloat16 (default: the model's, else "
        "float16 for kvmem and float32 for decode).",
        choices=MODEL_DTYPES,
        default={"kvmem": "float16", "decode": "float32"},
    ),
    "prompt_len": Field(
        int,
        ("decode",),
        "Prompt lengths, comma-separated.",
        maximum=MAX_TOKENS,
        default=128,
    ),
    "gen_len": Field(
        int, ("decode",), "Tokens generated per run.", maximum=MAX_GEN_LEN, default=32
    ),
    "backend": Field(
        str,
        ("decode",),
        f"{', '.join(BACKENDS)}, comma-separated (default sdpa).",
        choices=BACKENDS,
        default="sdpa",
    ),
    "mode": Field(
        str,
        ("decode",),
        "cache, no_cache, or both (default).",
        choices=("cache", "no_cache"),
        default=["cache", "no_cache"],
    ),
    "kv_dtype": Field(
        str,
        _CACHE,
        f"Cache dtypes: {', '.join(KV_DTYPES)} (default: dtype, or the model's).",
        choices=KV_DTYPES,
    ),
    "kv_scale_group": Field(
        int,
        _CACHE,
        "Elements per scale of quantised caches (default: a head).",
        maximum=MAX_TOKENS,
    ),
    "scale_dtype": Field(
        str,
        _CACHE,
        "Scales' dtype (float16).",
        choices=SCALE_DTYPES,
        default="float16",
    ),
    "sliding_window": Field(
        int,
        _CACHE,
        "Window of the windowed layers; 0 or none: no window (default: the model's).",
        minimum=0,
        maximum=MAX_TOKENS,
    ),
    "page_size": Field(int, _CACHE, "Paged blocks of P tokens.", maximum=MAX_TOKENS),
    "tp": Field(
        int,
        _CACHE,
        "Tensor-parallel ranks, comma-separated (fit: default gpus).",
        maximum=MAX_GPUS,
        default={"kvmem": 1},
    ),
    # one batch's sequence lengths: a list that replaces batch and seq_len (not an axis)
    "seq_lens": Field(
        int,
        ("kvmem",),
        f"One batch's lengths, up to {MAX_SEQUENCES:,} sequences: 100,50,200 or 8x512 or "
        "linspace:1:4096:64.",
        maximum=MAX_TOKENS,
    ),
    # capacity planning (fit)
    "memory": Field(str, ("fit",), "Memory of each GPU: 80GiB, 80GB (= 80e9 bytes), 1.5TiB."),
    "gpus": Field(int, ("fit",), "GPUs in all (default: tp, else 1).", maximum=MAX_GPUS),
    "weights_dtype": Field(
        str,
        ("fit",),
        "Weights' dtype (default: the model's).",
        choices=KV_DTYPES,
    ),
    "reserve": Field(
        str,
        ("fit",),
        "Per GPU, for activations and runtime: 10% or 4GiB.",
        default="10%",
    ),
    # scalar options
    "device": Field(
        str,
        ("kvmem", "decode"),
        "auto, cpu, cuda or cuda:i (default auto).",
        axis=False,
        default="auto",
    ),
    "measure": Field(
        bool,
        ("kvmem",),
        "Allocate the real cache and count it (default on).",
        axis=False,
        default=True,
    ),
    "prefill": Field(
        bool,
        ("decode",),
        "Prefill the prompt (timed), or fill the cache with random K/V instead.",
        axis=False,
        default=True,
    ),
    "warmup": Field(
        int,
        ("decode",),
        "Untimed generations first (default 2).",
        axis=False,
        minimum=0,
        maximum=MAX_REPEATS,
        default=2,
    ),
    "repeats": Field(
        int,
        ("decode",),
        "Timed generations (default 3).",
        axis=False,
        maximum=MAX_REPEATS,
        default=3,
    ),
    "threads": Field(
        int,
        ("decode",),
        f"CPU threads for torch.set_num_threads, {THREADS_PER_CPU} per CPU.",
        axis=False,
        maximum=max_threads,
    ),
    "cuda_graph": Field(
        bool,
        ("decode",),
        "Replay each decode step as a CUDA graph.",
        axis=False,
        default=False,
    ),
    "flush_l2": Field(
        bool,
        ("decode",),
        "Flush the GPU L2 cache before each step.",
        axis=False,
        default=False,
    ),
}


def fields_for(section: str) -> list[str]:
    """The fields a section uses, in schema order."""
    return [n for n, f in FIELDS.items() if section in f.sections]


def above_maximum(name: str, value: Any) -> str | None:
    """Why integer `value` is too large for field `name`, or None when it is not."""
    spec = FIELDS[name]
    limit = spec.upper
    if limit is None or isinstance(value, bool) or not isinstance(value, int) or value <= limit:
        return None
    if spec.maximum is max_threads:
        return f"must be <= {limit} ({THREADS_PER_CPU} per CPU, {limit // THREADS_PER_CPU} CPUs)"
    return f"must be <= {limit}"
