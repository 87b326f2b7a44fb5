"""KV-cache capacity formulas: element types and their scales, sliding windows, paged
blocks, MLA latents and tensor parallelism. Pure integer arithmetic; every command and
test takes these formulas from here.

One layer caches, per token of each sequence, `vectors` vectors of `width` elements:

- K and V per KV head: vectors = 2 * Hkv (per GPU under TP), width = head_dim;
- MLA: one latent, vectors = 1, width = kv_lora_rank + qk_rope_head_dim.

A vector of n elements of b bits takes ceil(n * b / 8) bytes (int4 packs two per byte).
A quantised vector stores its scales in the cache, ceil(n / g) of them in the scale dtype for
a scale group of g elements (`vector`: g = n, one scale per token per head), or none: a
per-tensor scale (`tensor`) is one static scale per layer's K and V, kept with the layer's
weights as vLLM, SGLang and TensorRT-LLM keep their float8 caches' (k_scale, v_scale). By
default float8 caches are per tensor, int8 and int4 ones per vector (LMDeploy's, KIVI's).

A layer with a sliding window W keeps min(S, W) tokens of a sequence of S tokens. Paged
allocation rounds every sequence's tokens in every layer up to whole blocks of P tokens:
ceil(tokens / P) * P. A contiguous cache gives every sequence the longest length.

A state layer (Mamba, gated DeltaNet, lightning attention, a short convolution) keeps a
state of fixed size per sequence instead (architecture.StateSpec), whatever the context:
its bytes add to the K/V cache's, and are split over tensor-parallel ranks with the
layer's heads and channels.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import FieldError
from .architecture import ModelSpec, StateSpec
from .dtypes import (
    KV_DTYPES,
    QUANTIZED_KV_DTYPES,
    SCALE_DTYPES,
    check_dtype,
    dtype_bytes,
    packed_bytes,
)

DEFAULT_SCALE_DTYPE = "float16"
#: kv_scale_group's words: one static scale per layer's K and V, held with the weights; one
#: scale per cached vector (a token's head, or its MLA latent).
PER_TENSOR, PER_VECTOR = "tensor", "vector"
SCALE_GROUP_WORDS = (PER_TENSOR, PER_VECTOR)


def default_scaling(dtype: str) -> str:
    """A quantised cache's scales when no group is given: per tensor for float8 (the
    engines' float8 caches), per vector for int8 and int4."""
    return PER_TENSOR if dtype.startswith("float8") else PER_VECTOR


#: Sequence lengths of one batch: a list of lengths, or {length: how many sequences}.
SeqLens = Sequence[int] | Mapping[int, int]
#: Each layer's window (None: global), or {window: how many layers}.
Windows = Sequence[int | None] | Mapping[int | None, int]
#: The most sequences one batch of listed lengths (seq_lens) may hold: they are kept one
#: by one.
MAX_SEQUENCES = 1_000_000


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def positive_int(field: str, value: object, minimum: int = 1) -> int:
    """`value` if it is an integer >= `minimum`, else a FieldError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FieldError(field, value, f"must be an integer >= {minimum}")
    return value


@dataclass(frozen=True)
class KvFormat:
    """The cache's element type, and for quantised types their scales: one scale per
    `scale_group` elements of a vector, or per vector (`vector`), or one static scale per
    layer's K and V held outside the cache (`tensor`); None: the dtype's default (float8
    per tensor, int8 and int4 per vector). Scales in the cache are `scale_dtype`."""

    dtype: str
    scale_group: int | str | None = None
    scale_dtype: str = DEFAULT_SCALE_DTYPE

    def __post_init__(self) -> None:
        check_dtype(self.dtype, "kv_dtype", KV_DTYPES)
        check_dtype(self.scale_dtype, "scale_dtype", SCALE_DTYPES)
        if self.scale_group is not None and self.scale_group not in SCALE_GROUP_WORDS:
            positive_int("kv_scale_group", self.scale_group)

    @property
    def quantized(self) -> bool:
        return self.dtype in QUANTIZED_KV_DTYPES

    @property
    def scaling(self) -> int | str:
        """The scale group in force: an element count, `tensor` or `vector`."""
        return self.scale_group if self.scale_group is not None else default_scaling(self.dtype)

    @property
    def per_tensor(self) -> bool:
        """Whether a quantised cache's scale is one per layer's K and V, held outside it."""
        return self.quantized and self.scaling == PER_TENSOR

    def scaled(self) -> frozenset[str]:
        """What of this cache carries scales, as the sections' scaled() name it: "kv"
        where quantised, "kv scales" where its scales are in the cache (their dtype may
        be set)."""
        named = {"kv": self.quantized, "kv scales": self.quantized and not self.per_tensor}
        return frozenset(name for name, carries in named.items() if carries)

    def describe(self) -> str:
        """The cache's format in words, naming a quantised one's scales where they are
        not its dtype's defaults: 'int8 in groups of 32, float32 scales', 'float8_e4m3fn,
        a scale per vector'; a 16- or 32-bit cache's is its dtype."""
        if not self.quantized:
            return self.dtype
        words = self.dtype
        group = self.scale_group
        if isinstance(group, int):
            words += f" in groups of {group:,}"
        elif group is not None and group != default_scaling(self.dtype):
            words += f", a scale per {group}"
        if self.scale_dtype != DEFAULT_SCALE_DTYPE and not self.per_tensor:
            words += f", {self.scale_dtype} scales"
        return words

    def value_bytes(self, width: int) -> int:
        """Bytes of one vector's values."""
        return packed_bytes(width, self.dtype)

    def group(self, width: int) -> int:
        """Elements per scale in a cached vector of `width` (a per-tensor scale's: all)."""
        return self.scaling if isinstance(self.scaling, int) else width

    def scales_per_vector(self, width: int) -> int:
        """ceil(width / group) for quantised types that store their scales, else 0."""
        if not self.quantized or self.per_tensor:
            return 0
        group = self.group(width)
        if group > width:
            raise FieldError(
                "kv_scale_group",
                group,
                f"exceeds the {width} elements of one cached vector "
                "(a scale group lies within one token's head or latent)",
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
    KV heads must split evenly or be replicated evenly (check_tp_split)."""
    check_tp_split(num_heads, num_kv_heads, tp)
    return max(num_kv_heads // tp, 1)


def check_tp_split(num_heads: int, num_kv_heads: int, tp: int, most: int | None = None) -> None:
    """FieldError naming tp where `tp` ranks cannot split `num_heads` query heads evenly or
    `num_kv_heads` KV heads evenly or replicated evenly, listing every tp that can, up to
    `most` where the caller can time no more (one node's GPUs)."""
    positive_int("tp", tp)
    reason = tp_split_problem(num_heads, num_kv_heads, tp)
    if reason is None:
        return
    sizes = [t for t in tensor_parallel_sizes(num_heads, num_kv_heads) if most is None or t <= most]
    raise FieldError("tp", tp, f"{reason}; tp may be {or_list(sizes)}")


def tp_split_problem(num_heads: int, num_kv_heads: int, tp: int) -> str | None:
    """Why `tp` ranks cannot split the heads (check_tp_split), or None where they can."""
    if num_heads % tp:
        return f"does not divide the {num_heads} query heads"
    if tp <= num_kv_heads and num_kv_heads % tp:
        return f"does not divide the {num_kv_heads} KV heads"
    if tp > num_kv_heads and tp % num_kv_heads:
        return f"is not a multiple of the {num_kv_heads} KV heads, so they cannot be replicated"
    return None


def tensor_parallel_sizes(num_heads: int, num_kv_heads: int) -> list[int]:
    """Every tp that splits `num_heads` query heads evenly and `num_kv_heads` KV heads
    evenly or replicates them evenly (check_tp_split)."""
    return [
        tp
        for tp in range(1, num_heads + 1)
        if not num_heads % tp and (not num_kv_heads % tp or not tp % num_kv_heads)
    ]


def or_list(values: list[int]) -> str:
    """'1, 2, 4 or 8'."""
    shown = [f"{v:,}" for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


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


def model_layout(spec: ModelSpec, fmt: KvFormat, tp: int = 1) -> TokenLayout:
    """What one of `spec`'s attention layers caches per token on one of `tp` ranks: K and V
    of its KV heads there, or its MLA latent."""
    latent = spec.mla.latent_dim if spec.mla else None
    return token_layout(spec.num_heads, spec.num_kv_heads, spec.head_dim, fmt, tp, latent)


#: The letters of a layer pattern: L a bounded layer (sliding, or chunked: both keep at
#: most their window of tokens), G a global one.
PATTERN_LETTERS = "LG"


def pattern_letters_wrong(pattern: str) -> bool:
    """Whether `pattern` is empty or holds a letter other than PATTERN_LETTERS'."""
    return not pattern or bool(set(pattern) - set(PATTERN_LETTERS))


def pattern_bounded(pattern: str, num_layers: int) -> list[bool]:
    """Which layers are bounded under `pattern`, repeated over the layers: 'LLLG' bounds
    three layers of every four, from the first. FieldError for any other letter."""
    if pattern_letters_wrong(pattern):
        raise FieldError(
            "layer_pattern",
            pattern,
            "expected letters L (a sliding or chunked layer) and G (a global one), "
            "repeated over the layers, such as LLLG",
        )
    return [pattern[i % len(pattern)] == "L" for i in range(num_layers)]


def layer_windows(
    num_layers: int,
    model_windows: Sequence[int | None] | None,
    override: int | None,
    pattern: str | None = None,
) -> tuple[int | None, ...]:
    """Each layer's bounded cache in tokens: its sliding window or chunk (None: global).

    `pattern` (L and G letters, see pattern_bounded) replaces the model's layout: its L
    layers keep `override` tokens, else the model's widest window. Without one, `override`
    None keeps the model's windows; 0 removes every window; W sets the window of the
    model's bounded layers to W, or of every layer when the model has none."""
    if model_windows is not None and len(model_windows) != num_layers:
        raise ValueError(f"{len(model_windows)} layer windows for {num_layers} layers")
    model = tuple(model_windows) if model_windows else (None,) * num_layers
    if pattern is not None:
        bounded = pattern_bounded(pattern, num_layers)
        window = override or max((w for w in model if w is not None), default=None)
        if window is None and any(bounded):
            raise FieldError(
                "layer_pattern", pattern, "needs sliding_window: the model has no window"
            )
        return tuple(window if b else None for b in bounded)
    if override is None:
        return model
    positive_int("sliding_window", override, minimum=0)
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
    positive_int("page_size", page_size)
    return ceil_div(tokens, page_size) * page_size


@dataclass(frozen=True)
class CacheBytes:
    """Bytes of a cache: its values and its scales."""

    values: int
    scales: int

    @property
    def total(self) -> int:
        return self.values + self.scales


def counted(items: SeqLens | Windows) -> Mapping:
    """{value: how many} of values given one by one (sequence lengths, layer windows), or
    already counted."""
    return items if isinstance(items, Mapping) else Counter(items)


def cache_slots(windows: Windows, seq_lens: SeqLens, page_size: int | None = None) -> int:
    """Token slots over all layers and sequences: sum over layers l and sequences s of
    allocated_tokens(layer_tokens(s, W_l), P). Layers of one window are counted once."""
    counts = counted(seq_lens)
    return sum(
        layers * n * allocated_tokens(layer_tokens(s, w), page_size)
        for w, layers in counted(windows).items()
        for s, n in counts.items()
    )


def cache_bytes(
    layout: TokenLayout,
    windows: Windows,
    seq_lens: SeqLens,
    page_size: int | None = None,
) -> CacheBytes:
    """Bytes of the cache of every layer (`windows`, one per layer) for sequences of
    `seq_lens` tokens: token slots * bytes per token slot, values and scales apart."""
    slots = cache_slots(windows, seq_lens, page_size)
    return CacheBytes(slots * layout.value_bytes, slots * layout.scale_bytes)


def kv_cache_bytes(
    num_layers: int,
    batch: int,
    seq_len: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: str,
    *,
    tp: int = 1,
    num_heads: int | None = None,
) -> int:
    """Bytes of a plain K/V cache (no window, no scales) of `batch` sequences of `seq_len`
    tokens: 2 * L * B * S * Hkv * D * b; with `tp` ranks (and the `num_heads` query heads
    they split), one rank's share, of kv_heads_per_rank KV heads."""
    heads = num_heads if num_heads is not None else num_kv_heads
    layout = token_layout(heads, num_kv_heads, head_dim, KvFormat(dtype), tp)
    return cache_bytes(layout, {None: num_layers}, {seq_len: batch}).total


def state_bytes(states: Sequence[StateSpec | None], dtype: str, batch: int = 1, tp: int = 1) -> int:
    """Bytes of the states of `batch` sequences over the layers `states` (None: a layer
    without one) of a model in `dtype`, on one of `tp` ranks: each layer's state split over
    the ranks with its heads and channels, as serving engines shard Mamba and linear
    attention layers (a rank's share rounded up to a byte)."""
    layers = Counter(s for s in states if s is not None)
    return batch * sum(n * ceil_div(s.bytes_in(dtype), tp) for s, n in layers.items())


def window_summary(windows: Windows) -> tuple[int | None, int]:
    """(the widest sliding window or None, how many layers have one)."""
    windowed = {w: n for w, n in counted(windows).items() if w is not None and n}
    return (max(windowed) if windowed else None), sum(windowed.values())


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
    windows: Windows,
    seq_lens: SeqLens,
    page_size: int | None,
) -> PagingReport:
    """Bytes the tokens need, bytes of a paged cache (blocks of `page_size`; None: not
    paged) and of a contiguous one (every sequence at the longest length)."""
    counts = counted(seq_lens)
    longest = {max(counts): sum(counts.values())}
    paged = cache_bytes(layout, windows, seq_lens, page_size).total if page_size else None
    return PagingReport(
        used_bytes=cache_bytes(layout, windows, seq_lens).total,
        paged_bytes=paged,
        contiguous_bytes=cache_bytes(layout, windows, longest).total,
    )


def parse_seq_lens(text: str, max_count: int = MAX_SEQUENCES) -> list[int]:
    """Sequence lengths of one batch: comma-separated items, each `N` (one sequence of N
    tokens), `CxN` (C sequences of N tokens) or `linspace:LOW:HIGH:C` (C lengths evenly
    spaced from LOW to HIGH, rounded to the nearest integer). At most `max_count` lengths
    in all, counted before any list is built."""
    lengths: list[int] = []
    for item in (t.strip() for t in str(text).split(",")):
        if item.startswith("linspace:"):
            low, high, count = _linspace_bounds(item)
            _check_count(len(lengths) + count, max_count, item)
            lengths.extend(_linspace(low, high, count))
        elif "x" in item:
            count_text, _, length_text = item.partition("x")
            length, count = _positive(length_text, item), _positive(count_text, item)
            _check_count(len(lengths) + count, max_count, item)
            lengths.extend([length] * count)
        else:
            _check_count(len(lengths) + 1, max_count, item)
            lengths.append(_positive(item, item))
    return lengths


def _check_count(total: int, max_count: int, item: str) -> None:
    if total > max_count:
        raise FieldError(
            "seq_lens", item, f"more than {max_count:,} sequences in one batch ({total:,})"
        )


def _positive(text: str, item: str) -> int:
    if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", text):  # ASCII digits, as every flag takes
        raise FieldError("seq_lens", item, "expected N, CxN or linspace:LOW:HIGH:C")
    value = int(text)
    if value < 1:
        raise FieldError("seq_lens", item, "values must be >= 1")
    return value


def _linspace_bounds(item: str) -> tuple[int, int, int]:
    parts = item.split(":")[1:]
    if len(parts) != 3:
        raise FieldError("seq_lens", item, "expected linspace:LOW:HIGH:C")
    low, high, count = (_positive(p, item) for p in parts)
    if high < low:
        raise FieldError("seq_lens", item, "HIGH must be >= LOW")
    return low, high, count


def _linspace(low: int, high: int, count: int) -> list[int]:
    if count == 1:
        return [low]
    span, steps = high - low, count - 1
    return [low + (2 * i * span + steps) // (2 * steps) for i in range(count)]
