"""A preallocated KV cache for one attention layer."""

from __future__ import annotations

import torch
from torch import nn

from ..model.shapes import check_int


class KVCache(nn.Module):
    """K and V buffers of shape (batch_size, num_kv_heads, max_seq_len, head_dim).

    `update` copies new K/V into the buffers in place (no torch.cat; work proportional to
    the new tokens) and returns views of everything cached so far. Writing at `start_pos`
    sets the length to start_pos + new tokens, so rewriting an earlier position (e.g.
    re-running a chunk) truncates what followed it.
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        max_seq_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("batch_size", batch_size),
            ("num_kv_heads", num_kv_heads),
            ("max_seq_len", max_seq_len),
            ("head_dim", head_dim),
        ):
            check_int(f"KVCache {name}", value)
        shape = (batch_size, num_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k", torch.empty(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.empty(shape, dtype=dtype, device=device), persistent=False)
        self.max_seq_len = max_seq_len
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes of storage held by the K and V buffers."""
        return self.k.untyped_storage().nbytes() + self.v.untyped_storage().nbytes()

    def reset(self) -> None:
        """Forget the cached tokens (the buffers are kept and reused)."""
        self.length = 0

    def update(
        self, k: torch.Tensor, v: torch.Tensor, start_pos: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k and v, shaped (batch, num_kv_heads, new_tokens, head_dim), at `start_pos`
        (default: the current length) and return K and V for positions [0, start_pos + new).

        Raises ValueError, leaving the cache unchanged, when the write would pass
        max_seq_len, leave a gap, or when k/v do not match the cache's shape, dtype or device.
        """
        start = self.length if start_pos is None else start_pos
        self._check(k, v, start)
        end = start + k.shape[2]
        self.k[:, :, start:end].copy_(k)
        self.v[:, :, start:end].copy_(v)
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def _check(self, k: torch.Tensor, v: torch.Tensor, start: int) -> None:
        b, h, _, d = self.k.shape
        for name, t in (("k", k), ("v", v)):
            if t.dim() != 4 or t.shape[0] != b or t.shape[1] != h or t.shape[3] != d:
                raise ValueError(
                    f"KVCache.update: {name} has shape {tuple(t.shape)}, expected "
                    f"({b}, {h}, new_tokens, {d}) (batch, num_kv_heads, tokens, head_dim)"
                )
            if t.dtype != self.k.dtype:
                raise ValueError(
                    f"KVCache.update: {name} has dtype {t.dtype}, the cache holds {self.k.dtype}"
                )
            if t.device != self.k.device:
                raise ValueError(
                    f"KVCache.update: {name} is on {t.device}, the cache is on {self.k.device}"
                )
        if k.shape[2] != v.shape[2]:
            raise ValueError(f"KVCache.update: k has {k.shape[2]} tokens but v has {v.shape[2]}")
        check_int("KVCache.update: start_pos", start, minimum=0)
        if start > self.length:
            raise ValueError(
                f"KVCache.update: start_pos {start} would leave a gap after the "
                f"{self.length} cached tokens"
            )
        if start + k.shape[2] > self.max_seq_len:
            raise ValueError(
                f"KVCache.update: writing {k.shape[2]} tokens at position {start} passes "
                f"max_seq_len {self.max_seq_len}"
            )
