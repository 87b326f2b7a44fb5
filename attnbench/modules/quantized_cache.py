"""A real, allocatable KV cache in any KV dtype: float8 as torch float8 tensors, int8, int4
packed two values per byte, with per-group scales in the cache or one static scale per
layer's K and V beside it (per tensor); K and V per head, or MLA latents; per layer windows;
contiguous or as a pool of paged blocks. Used to measure what the formulas
in capacity.py predict, byte for byte (see measure/memory.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..model.capacity import (
    KvFormat,
    SeqLens,
    TokenLayout,
    allocated_tokens,
    ceil_div,
    counted,
    layer_tokens,
)
from .dtypes import storage_dtype

#: Largest magnitude of each integer code: int8 in [-127, 127], int4 in [-7, 7].
_INT_MAX = {"int8": 127, "int4": 7}


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Pack int4 codes in [-8, 7] two per byte along the last dim (even index in the low
    nibble); an odd width gets a zero high nibble in its last byte."""
    if codes.shape[-1] % 2:
        codes = torch.nn.functional.pad(codes, (0, 1))
    nibbles = (codes.to(torch.int16) & 0xF).to(torch.uint8)
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor, width: int) -> torch.Tensor:
    """The int8 codes of `width` values packed by pack_int4."""
    nibbles = torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)[..., :width]
    signed = nibbles.to(torch.int16)
    return torch.where(signed > 7, signed - 16, signed).to(torch.int8)


def _groups(x: torch.Tensor, group: int) -> torch.Tensor:
    """(..., width) -> (..., ceil(width / group), group), zero-padded."""
    width = x.shape[-1]
    pad = ceil_div(width, group) * group - width
    return torch.nn.functional.pad(x, (0, pad)).unflatten(-1, (-1, group))


def _code_max(fmt: KvFormat) -> float:
    """The largest magnitude a code of `fmt` holds."""
    return float(_INT_MAX.get(fmt.dtype) or torch.finfo(storage_dtype(fmt.dtype)).max)


def _encode(scaled: torch.Tensor, fmt: KvFormat) -> torch.Tensor:
    """Values already divided by their scales, as `fmt` stores them (clamped to its
    codes: a per-tensor scale set on earlier tokens may not cover later ones)."""
    code_max = _code_max(fmt)
    scaled = scaled.clamp(-code_max, code_max)
    if fmt.dtype not in _INT_MAX:
        return scaled.to(storage_dtype(fmt.dtype))
    codes = scaled.round().to(torch.int8)
    return pack_int4(codes) if fmt.dtype == "int4" else codes


def _decode(values: torch.Tensor, fmt: KvFormat, width: int) -> torch.Tensor:
    """float32 codes of stored values (int4 unpacked)."""
    return (unpack_int4(values, width) if fmt.dtype == "int4" else values).float()


def tensor_scales(x: torch.Tensor, fmt: KvFormat) -> torch.Tensor:
    """Per-tensor scales for `fmt` calibrated on x (batch, vectors, tokens, width): one for
    K's heads and one for V's (the first and second half of the vectors), one for an MLA
    latent (one vector), each absmax / (largest code) in float32, shaped (1, vectors, 1,
    1) to scale x."""
    batch, vectors, tokens, width = x.shape
    parts = 2 if vectors > 1 else 1
    halves = x.float().abs().reshape(batch, parts, vectors // parts, tokens, width)
    scales = halves.amax(dim=(0, 2, 3, 4)) / _code_max(fmt)
    scales = scales.clamp_min(torch.finfo(torch.float32).tiny)
    return scales.repeat_interleave(vectors // parts).view(1, vectors, 1, 1)


def quantize(
    x: torch.Tensor, fmt: KvFormat, tensor_scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Values of x (..., width) as stored in `fmt`, and their scales (..., groups) or None
    (an unquantised format, or a per-tensor one, whose `tensor_scale` divides x: see
    tensor_scales).

    Scales are absmax / (largest code) per group, rounded to the scale dtype first so that
    dequantising with the stored scale is exact up to the code's own rounding."""
    if not fmt.quantized:
        return x.to(storage_dtype(fmt.dtype)), None
    if fmt.per_tensor:
        assert tensor_scale is not None, "a per-tensor format needs its scale"
        return _encode(x.float() / tensor_scale, fmt), None
    width = x.shape[-1]
    groups = _groups(x.float(), fmt.group(width))
    scale_dtype = storage_dtype(fmt.scale_dtype)
    absmax = groups.abs().amax(dim=-1, keepdim=True)
    scales = (absmax / _code_max(fmt)).clamp_min(torch.finfo(scale_dtype).tiny).to(scale_dtype)
    scaled = (groups / scales.float()).flatten(-2)[..., :width]
    return _encode(scaled, fmt), scales.squeeze(-1)


def dequantize(
    values: torch.Tensor,
    scales: torch.Tensor | None,
    fmt: KvFormat,
    width: int,
    tensor_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """float32 values back from what `quantize` stored."""
    if tensor_scale is not None:
        return _decode(values, fmt, width) * tensor_scale
    if scales is None:
        return values.float()
    groups = _groups(_decode(values, fmt, width), fmt.group(width))
    return (groups * scales.float().unsqueeze(-1)).flatten(-2)[..., :width]


class LayerStorage:
    """One layer's cache: values (batch, vectors, tokens, stored width) and, for quantised
    dtypes, scales (batch, vectors, tokens, groups). For K and V the first half of the
    vectors are the K heads, the second half the V heads; an MLA cache has one vector.

    For a paged pool, `batch` is the number of blocks and `tokens` the block size."""

    def __init__(
        self, batch: int, tokens: int, layout: TokenLayout, device: torch.device | str = "cpu"
    ) -> None:
        self.layout = layout
        fmt, width = layout.fmt, layout.width
        store = storage_dtype(fmt.dtype)
        stored_width = fmt.value_bytes(width) // store.itemsize  # int4: ceil(width / 2) bytes
        shape = (batch, layout.vectors, tokens)
        self.values = torch.empty((*shape, stored_width), dtype=store, device=device)
        self.scales = None
        self.tensor_scale: torch.Tensor | None = None
        if fmt.quantized and not fmt.per_tensor:
            self.scales = torch.empty(
                (*shape, fmt.scales_per_vector(width)),
                dtype=storage_dtype(fmt.scale_dtype),
                device=device,
            )

    def tensors(self) -> list[torch.Tensor]:
        return [self.values] + ([self.scales] if self.scales is not None else [])

    @property
    def nbytes(self) -> int:
        """Bytes of storage held by the values and the scales."""
        return sum(t.untyped_storage().nbytes() for t in self.tensors())

    def write(self, start: int, x: torch.Tensor) -> None:
        """Store x, shaped (batch, vectors, new_tokens, width), at token `start`. A
        per-tensor format's scale is calibrated on its first write and kept (an engine
        takes it from the checkpoint), a float32 outside the cache's bytes."""
        fmt, end = self.layout.fmt, start + x.shape[2]
        if fmt.per_tensor and self.tensor_scale is None:
            self.tensor_scale = tensor_scales(x, fmt)
        values, scales = quantize(x, fmt, self.tensor_scale)
        self.values[:, :, start:end].copy_(values)
        if scales is not None:
            self.scales[:, :, start:end].copy_(scales)  # type: ignore[index]

    def read(self, end: int) -> torch.Tensor:
        """Tokens [0, end) of every vector, dequantised to float32."""
        scales = None if self.scales is None else self.scales[:, :, :end]
        return dequantize(
            self.values[:, :, :end], scales, self.layout.fmt, self.layout.width, self.tensor_scale
        )


def allocate_cache(
    layout: TokenLayout,
    windows: Sequence[int | None],
    seq_lens: SeqLens,
    page_size: int | None = None,
    device: torch.device | str = "cpu",
) -> list[LayerStorage]:
    """Every layer's storage. Contiguous (page_size None): all sequences at the longest
    length, capped by the layer's window. Paged: a pool of exactly the blocks the
    sequences need, sum over sequences of ceil(min(s, W) / P) blocks per layer."""
    counts = counted(seq_lens)
    if page_size is None:
        longest, batch = max(counts), sum(counts.values())
        return [LayerStorage(batch, layer_tokens(longest, w), layout, device) for w in windows]
    return [
        LayerStorage(
            sum(n * allocated_tokens(layer_tokens(s, w), page_size) for s, n in counts.items())
            // page_size,
            page_size,
            layout,
            device,
        )
        for w in windows
    ]
