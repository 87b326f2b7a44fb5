"""KV-cache capacity formulas: element types and their scales, sliding windows, paged
blocks, MLA latents and tensor parallelism. Pure integer arithmetic; every command and
test takes these formulas from here.

One layer caches, per token of each sequence, `vectors` vectors of `width` elements:

- K and V per KV head: vectors = 2 * Hkv (per GPU under TP), width = head_dim;
- MLA: one latent, vectors = 1, width = kv_lora_rank + qk_rope_head_dim.

A vector of n elements of b bits takes ceil(n * b / 8) bytes (int4 packs two per byte).
A quantised vector (float8, int8, int4) also stores ceil(n / g) scales for a scale group of
g elements (default g = n: one scale per token per head), in the scale dtype.

A layer with a sliding window W keeps min(S, W) tokens of a sequence of S tokens. Paged
allocation rounds every sequence's tokens in every layer up to whole blocks of P tokens:
ceil(tokens / P) * P. A contiguous cache gives every sequence the longest length.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UsageError
from ..model.formulas import DTYPE_BITS, dtype_bytes

#: Element types a KV cache may use, independent of the model's dtype.
KV_DTYPES: tuple[str, ...] = (
    "float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2", "int8", "int4",
)  # fmt: skip
#: KV dtypes that store scales beside their values.
QUANTIZED_KV_DTYPES: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "int8", "int4")
#: dtypes a scale may use.
SCALE_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
DEFAULT_SCALE_DTYPE = "float16"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def packed_bytes(elements: int, dtype: str) -> int:
    """Bytes of `elements` values of `dtype` packed densely: ceil(elements * bits / 8)."""
    return ceil_div(elements * DTYPE_BITS[dtype], 8)


@dataclass(frozen=True)
class KvFormat:
    """The cache's element type, and for quantised types their scales: one scale per
    `scale_group` elements of a vector (None: one per vector), stored as `scale_dtype`."""

    dtype: str
    scale_group: int | None = None
    scale_dtype: str = DEFAULT_SCALE_DTYPE

    def __post_init__(self) -> None:
        if self.dtype not in KV_DTYPES:
            raise UsageError(
                f"--kv-dtype: unknown dtype {self.dtype!r}; choose from {', '.join(KV_DTYPES)}"
            )
        if self.scale_dtype not in SCALE_DTYPES:
            raise UsageError(
                f"--scale-dtype: unknown dtype {self.scale_dtype!r}; "
                f"choose from {', '.join(SCALE_DTYPES)}"
            )
        group = self.scale_group
        if group is not None and (isinstance(group, bool) or not isinstance(group, int)
                                  or group < 1):  # fmt: skip
            raise UsageError(f"--kv-scale-group: must be a positive integer, got {group!r}")

    @property
    def quantized(self) -> bool:
        return self.dtype in QUANTIZED_KV_DTYPES

    def value_bytes(self, width: int) -> int:
        """Bytes of one vector's values."""
        return packed_bytes(width, self.dtype)

    def scales_per_vector(self, width: int) -> int:
        """ceil(width / scale_group) for quantised types, else 0."""
        if not self.quantized:
            return 0
        group = self.scale_group or width
        if group > width:
            raise UsageError(
                f"--kv-scale-group: {group} exceeds the {width} elements of one cached vector "
                "(a scale group lies within one token's head or latent)"
            )
        return ceil_div(width, group)

    def scale_bytes(self, width: int) -> int:
        """Bytes of one vector's scales."""
        return self.scales_per_vector(width) * dtype_bytes(self.scale_dtype)


@dataclass(frozen=True)
class TokenLayout:
    """What one layer caches per token of one sequence: `vectors` vectors of `width`."""

    vectors: int
    width: int
    fmt: KvFormat

    @property
    def value_bytes(self) -> int:
        return self.vectors * self.fmt.value_bytes(self.width)

    @property
    def scale_bytes(self) -> int:
        return self.vectors * self.fmt.scale_bytes(self.width)

    @property
    def bytes(self) -> int:
        return self.value_bytes + self.scale_bytes


def kv_heads_per_rank(num_heads: int, num_kv_heads: int, tp: int) -> int:
    """KV heads one of `tp` tensor-parallel ranks keeps: Hkv / tp, or one (replicated) when
    tp exceeds Hkv, as serving engines shard them. Query heads must split evenly, and
    KV heads must split evenly or be replicated evenly."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UsageError(f"--tp: must be a positive integer, got {tp!r}")
    if num_heads % tp:
        raise UsageError(f"--tp: {tp} does not divide the {num_heads} query heads")
    if tp <= num_kv_heads:
        if num_kv_heads % tp:
            raise UsageError(f"--tp: {tp} does not divide the {num_kv_heads} KV heads")
        return num_kv_heads // tp
    if tp % num_kv_heads:
        raise UsageError(
            f"--tp: {tp} is not a multiple of the {num_kv_heads} KV heads, so they cannot "
            "be replicated evenly"
        )
    return 1


def token_layout(
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    fmt: KvFormat,
    tp: int = 1,
    mla_latent_dim: int | None = None,
) -> TokenLayout:
    """The per-GPU layout: K and V of this rank's KV heads, or an MLA latent, which every
    rank keeps whole (the latent is shared by all heads, so TP replicates it)."""
    heads_here = kv_heads_per_rank(num_heads, num_kv_heads, tp)
    if mla_latent_dim is not None:
        return TokenLayout(1, mla_latent_dim, fmt)
    return TokenLayout(2 * heads_here, head_dim, fmt)


def layer_windows(
    num_layers: int, model_windows: Sequence[int | None] | None, override: int | None
) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: global). `override` None keeps the model's
    windows; 0 removes every window; W sets the window of the model's windowed layers to W,
    or of every layer when the model has none."""
    if model_windows is not None and len(model_windows) != num_layers:
        raise ValueError(f"{len(model_windows)} layer windows for {num_layers} layers")
    model = tuple(model_windows) if model_windows else (None,) * num_layers
    if override is None:
        return model
    if isinstance(override, bool) or not isinstance(override, int) or override < 0:
        raise UsageError(f"--sliding-window: expected an integer >= 0, got {override!r}")
    if override == 0:
        return (None,) * num_layers
    if any(w is not None for w in model):
        return tuple(None if w is None else override for w in model)
    return (override,) * num_layers


def layer_tokens(seq_len: int, window: int | None) -> int:
    """Tokens a layer keeps of one sequence: min(S, W) with a window W, else S."""
    return seq_len if window is None else min(seq_len, window)


def allocated_tokens(tokens: int, page_size: int | None) -> int:
    """Token slots allocated for `tokens`: whole blocks of P, ceil(tokens / P) * P."""
    if page_size is None:
        return tokens
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise UsageError(f"--page-size: must be a positive integer, got {page_size!r}")
    return ceil_div(tokens, page_size) * page_size


@dataclass(frozen=True)
class CacheBytes:
    """Bytes of a cache: its values and its scales."""

    values: int
    scales: int

    @property
    def total(self) -> int:
        return self.values + self.scales


def cache_slots(
    windows: Sequence[int | None], seq_lens: Sequence[int], page_size: int | None = None
) -> int:
    """Token slots over all layers and sequences: sum over layers l and sequences s of
    allocated_tokens(layer_tokens(s, W_l), P)."""
    counts = Counter(seq_lens)
    return sum(
        n * allocated_tokens(layer_tokens(s, w), page_size)
        for w in windows
        for s, n in counts.items()
    )


def cache_bytes(
    layout: TokenLayout,
    windows: Sequence[int | None],
    seq_lens: Sequence[int],
    page_size: int | None = None,
) -> CacheBytes:
    """Bytes of the cache of every layer (`windows`, one per layer) for sequences of
    `seq_lens` tokens: token slots * bytes per token slot, values and scales apart."""
    slots = cache_slots(windows, seq_lens, page_size)
    return CacheBytes(slots * layout.value_bytes, slots * layout.scale_bytes)


def waste_pct(allocated: int, used: int) -> float:
    """Share of an allocation that holds no token, in percent: 100 * (allocated - used) /
    allocated."""
    return 100.0 * (allocated - used) / allocated if allocated else 0.0


@dataclass(frozen=True)
class PagingReport:
    """A batch of sequences of different lengths, stored paged and stored contiguously."""

    used_bytes: int
    paged_bytes: int | None
    contiguous_bytes: int

    @property
    def paged_waste_pct(self) -> float | None:
        return None if self.paged_bytes is None else waste_pct(self.paged_bytes, self.used_bytes)

    @property
    def contiguous_waste_pct(self) -> float:
        return waste_pct(self.contiguous_bytes, self.used_bytes)


def paging_report(
    layout: TokenLayout,
    windows: Sequence[int | None],
    seq_lens: Sequence[int],
    page_size: int | None,
) -> PagingReport:
    """Bytes the tokens need, bytes of a paged cache (blocks of `page_size`; None: not
    paged) and of a contiguous one (every sequence at the longest length)."""
    longest = [max(seq_lens)] * len(seq_lens)
    paged = cache_bytes(layout, windows, seq_lens, page_size).total if page_size else None
    return PagingReport(
        used_bytes=cache_bytes(layout, windows, seq_lens).total,
        paged_bytes=paged,
        contiguous_bytes=cache_bytes(layout, windows, longest).total,
    )


def parse_seq_lens(text: str, flag: str = "--seq-lens") -> list[int]:
    """Sequence lengths of one batch: comma-separated items, each `N` (one sequence of N
    tokens), `CxN` (C sequences of N tokens) or `linspace:LOW:HIGH:C` (C lengths evenly
    spaced from LOW to HIGH, rounded to the nearest integer)."""
    lengths: list[int] = []
    for item in (t.strip() for t in str(text).split(",")):
        if item.startswith("linspace:"):
            lengths.extend(_linspace(item, flag))
        elif "x" in item:
            count, _, length = item.partition("x")
            lengths.extend([_positive(length, flag, item)] * _positive(count, flag, item))
        else:
            lengths.append(_positive(item, flag, item))
    return lengths


def _positive(text: str, flag: str, item: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(
            f"{flag}: bad item {item!r}; expected N, CxN or linspace:LOW:HIGH:C"
        ) from None
    if value < 1:
        raise UsageError(f"{flag}: {item!r}: values must be >= 1")
    return value


def _linspace(item: str, flag: str) -> list[int]:
    parts = item.split(":")[1:]
    if len(parts) != 3:
        raise UsageError(f"{flag}: bad item {item!r}; expected linspace:LOW:HIGH:C")
    low, high, count = (_positive(p, flag, item) for p in parts)
    if high < low:
        raise UsageError(f"{flag}: {item!r}: HIGH must be >= LOW")
    if count == 1:
        return [low]
    span, steps = high - low, count - 1
    return [low + (2 * i * span + steps) // (2 * steps) for i in range(count)]
