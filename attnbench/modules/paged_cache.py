"""A paged KV cache (PagedAttention) for one attention layer, and two ways to decode over it.

K and V live in a pool of `num_blocks` blocks of `block_size` tokens. Each sequence owns
the blocks listed in its row of the block table, taken from a free list as its tokens
arrive, so a sequence holds ceil(length / block_size) blocks wherever the pool had room:
its blocks are scattered among the other sequences', as in a serving engine.

The pool is laid out head-major, (num_kv_heads, num_blocks, block_size, head_dim), not
block-major (num_blocks, block_size, num_kv_heads, head_dim) as vLLM's kernels read it:
both paths here want head-major (torch's own, private, paged attention example keeps its
pool so too). flex_attention reads the pool as it is, viewed as one batch row of
num_blocks * block_size keys (1, num_kv_heads, keys, head_dim), with no copy; the gather
path copies whole blocks (block_size * head_dim contiguous elements per head) and gets
(batch, num_kv_heads, keys, head_dim) with contiguous rows, which SDPA takes as they are.

Decode paths, for one new query token per sequence, each prepared once (indices, masks
and buffers built outside the call) and returned as a call with no argument:

- prepare_gather: copy every sequence's blocks through the block table into a buffer
  (index_select over the whole batch at once), then torch's fused attention;
  ragged lengths are padded to the longest and masked;
- prepare_flex: torch's flex_attention straight over the pool, with a BlockMask built
  from the block table: for each sequence, its full blocks, and its last partial block
  through a mask_mod that maps physical key slots back to logical positions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

from ..model.capacity import ceil_div
from ..model.shapes import check_int
from .attention import GroupedQueryAttention, folded_decode
from .kv_cache import KVCache

#: A prepared decode over a paged cache: returns (batch, num_heads, 1, head_dim).
PagedDecode = Callable[[], torch.Tensor]
#: Seed of the random K/V `PagedKVCache.filled` writes.
FILL_SEED = 7
#: Block table entry of a logical block a sequence does not have.
NO_BLOCK = -1


class PagedKVCache(nn.Module):
    """K and V for `batch_size` sequences in a shared pool of `num_blocks` blocks.

    `k` and `v` are the pools, (num_kv_heads, num_blocks, block_size, head_dim);
    `block_table` (batch_size, num_blocks) int32 maps a sequence's logical block j to
    its physical block (NO_BLOCK past its end). Blocks are allocated on demand, one when a
    sequence's length passes a multiple of block_size, from a free list taken in pool
    order, or shuffled with `seed`. A ValueError, leaving the cache unchanged, reports
    inputs that do not fit and a pool with too few free blocks.
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        block_size: int,
        num_blocks: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("batch_size", batch_size),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
            ("block_size", block_size),
            ("num_blocks", num_blocks),
        ):
            check_int(f"PagedKVCache {name}", value)
        shape = (num_kv_heads, num_blocks, block_size, head_dim)
        # zeroed, not empty: the kernels read whole blocks, and a zero weight times a NaN
        # left in an unwritten slot past a sequence's end would still be NaN
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        table = torch.full((batch_size, num_blocks), NO_BLOCK, dtype=torch.int32, device=device)
        self.register_buffer("block_table", table, persistent=False)
        self.block_size = block_size
        self.num_blocks = num_blocks
        order = list(range(num_blocks))
        if seed is not None:
            gen = torch.Generator().manual_seed(seed)
            order = torch.randperm(num_blocks, generator=gen).tolist()
        self._free = order[::-1]  # popped from the end: blocks are handed out in `order`
        self._lengths = [0] * batch_size

    @classmethod
    def filled(
        cls,
        lengths: Sequence[int],
        num_kv_heads: int,
        head_dim: int,
        block_size: int,
        num_blocks: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        seed: int | None = FILL_SEED,
    ) -> PagedKVCache:
        """A cache of sequences of `lengths` tokens holding random K/V (seeded with
        FILL_SEED), as if their prompts had been prefilled the way a serving engine does
        it: the sequences grow in turn, a block each, from a free list shuffled with `seed`
        (None: in pool order). The pool has `num_blocks` blocks, by default exactly those
        the sequences need."""
        for i, length in enumerate(lengths):
            check_int(f"PagedKVCache.filled: lengths[{i}]", length, minimum=0)
        needed = sum(ceil_div(n, block_size) for n in lengths)
        blocks = needed if num_blocks is None else num_blocks
        cache = cls(len(lengths), num_kv_heads, head_dim, block_size, blocks, dtype, device, seed)
        if needed > blocks:
            raise cache._exhausted(needed, "filling the cache")
        for start in range(0, max(lengths, default=0), block_size):
            for seq, length in enumerate(lengths):
                if start < length:
                    cache._reserve(seq, min(block_size, length - start))
        gen = torch.Generator(device=cache.k.device).manual_seed(FILL_SEED)
        for pool in (cache.k, cache.v):
            pool.normal_(generator=gen)  # in place, blocks in use or not: GBs at long contexts
        return cache

    @classmethod
    def copy_of(
        cls, cache: KVCache, length: int, block_size: int, seed: int | None = FILL_SEED
    ) -> PagedKVCache:
        """A paged copy of the first `length` tokens of every sequence of a contiguous
        cache, its blocks taken as `filled` takes them (the sequences grow in turn, from a
        free list shuffled with `seed`): the same K/V, so that a step over either cache
        must give the same output."""
        check_int("PagedKVCache.copy_of: length", length, minimum=1)
        batch, kv_heads, _, dim = cache.k.shape
        blocks = batch * ceil_div(length, block_size)
        paged = cls(batch, kv_heads, dim, block_size, blocks, cache.k.dtype, cache.k.device, seed)
        for start in range(0, length, block_size):
            for seq in range(batch):
                paged._reserve(seq, min(block_size, length - start))
        for seq in range(batch):
            slots = paged._slots(seq, 0, length)
            paged._write(slots, cache.k[seq, :, :length], cache.v[seq, :, :length])
        return paged

    def slots_at(self, position: int) -> torch.Tensor:
        """The pool slot of `position` in every sequence, (batch_size,): where a decode
        step at that position writes its new K/V."""
        for seq, length in enumerate(self._lengths):
            if not 0 <= position < length:
                raise ValueError(
                    f"PagedKVCache: position {position} is not among sequence {seq}'s "
                    f"{length} tokens"
                )
        return torch.cat(
            [self._slots(seq, position, position + 1) for seq in range(self.batch_size)]
        )

    # --- sizes ------------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        return len(self._lengths)

    @property
    def num_kv_heads(self) -> int:
        return self.k.shape[0]

    @property
    def head_dim(self) -> int:
        return self.k.shape[3]

    @property
    def lengths(self) -> tuple[int, ...]:
        """Tokens cached per sequence."""
        return tuple(self._lengths)

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self._free)

    def num_seq_blocks(self, seq: int) -> int:
        """Blocks sequence `seq` holds: ceil(length / block_size)."""
        return ceil_div(self._lengths[seq], self.block_size)

    def padded_table(self) -> torch.Tensor:
        """The block table cut to the longest sequence's blocks, (batch_size, blocks),
        the entries past a shorter sequence's end block 0 (whose keys a reader masks or
        leaves past the sequence's length)."""
        blocks = max(self.num_seq_blocks(seq) for seq in range(self.batch_size))
        return self.block_table[:, :blocks].clamp(min=0)

    def seq_blocks(self, seq: int) -> list[int]:
        """The physical blocks of sequence `seq`, in logical order."""
        return self.block_table[seq, : self.num_seq_blocks(seq)].tolist()

    @property
    def token_bytes(self) -> int:
        """Bytes one token of one sequence takes: K and V of every KV head."""
        return 2 * self.num_kv_heads * self.head_dim * self.k.element_size()

    @property
    def block_bytes(self) -> int:
        return self.block_size * self.token_bytes

    @property
    def pool_bytes(self) -> int:
        """Bytes of the whole pool, K and V, in use or free."""
        return self.num_blocks * self.block_bytes

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the blocks in use."""
        return self.blocks_in_use * self.block_bytes

    @property
    def used_bytes(self) -> int:
        """Bytes of the tokens stored; allocated_bytes - used_bytes is the part of the
        sequences' last blocks that holds no token yet."""
        return sum(self._lengths) * self.token_bytes

    # --- writing ----------------------------------------------------------------------

    def append(self, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append k and v, (num_kv_heads, new_tokens, head_dim), to sequence `seq`,
        taking blocks from the free list as its length passes their boundaries."""
        self._check_seq(seq)
        self._check_kv("append", k, v, (self.num_kv_heads, None, self.head_dim))
        needed = self._blocks_needed(seq, k.shape[1])
        if needed > len(self._free):
            raise self._exhausted(needed, f"sequence {seq}")
        self._write(self._reserve(seq, k.shape[1]), k, v)

    def append_batch(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append one token to every sequence: k and v (batch_size, num_kv_heads, 1,
        head_dim), as an attention layer produces them in a decode step."""
        self._check_kv("append_batch", k, v, (self.batch_size, self.num_kv_heads, 1, self.head_dim))
        needed = sum(self._blocks_needed(seq, 1) for seq in range(self.batch_size))
        if needed > len(self._free):
            raise self._exhausted(needed, "the batch")
        slots = torch.cat([self._reserve(seq, 1) for seq in range(self.batch_size)])
        self._write(slots, k[:, :, 0].transpose(0, 1), v[:, :, 0].transpose(0, 1))

    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequence `seq`'s K and V, copied out of its blocks: (num_kv_heads, length,
        head_dim) each, contiguous."""
        self._check_seq(seq)
        slots = self._slots(seq, 0, self._lengths[seq])
        return self.flat_pool(self.k)[:, slots], self.flat_pool(self.v)[:, slots]

    def _blocks_needed(self, seq: int, tokens: int) -> int:
        length = self._lengths[seq]
        return ceil_div(length + tokens, self.block_size) - ceil_div(length, self.block_size)

    def _reserve(self, seq: int, tokens: int) -> torch.Tensor:
        """Grow sequence `seq` by `tokens` (free blocks checked by the caller) and return
        the pool slots of the new positions."""
        start = self.num_seq_blocks(seq)
        for j in range(self._blocks_needed(seq, tokens)):
            self.block_table[seq, start + j] = self._free.pop()
        first = self._lengths[seq]
        self._lengths[seq] += tokens
        return self._slots(seq, first, first + tokens)

    def _slots(self, seq: int, first: int, end: int) -> torch.Tensor:
        """Pool slots (physical block * block_size + offset) of positions [first, end)."""
        positions = torch.arange(first, end, device=self.block_table.device)
        blocks = self.block_table[seq, positions // self.block_size].long()
        return blocks * self.block_size + positions % self.block_size

    def _write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.flat_pool(self.k)[:, slots] = k
        self.flat_pool(self.v)[:, slots] = v

    @staticmethod
    def flat_pool(pool: torch.Tensor) -> torch.Tensor:
        """The pool as (num_kv_heads, num_blocks * block_size, head_dim): one row per slot."""
        heads, blocks, size, dim = pool.shape
        return pool.view(heads, blocks * size, dim)

    # --- checks -----------------------------------------------------------------------

    def _exhausted(self, needed: int, who: str) -> ValueError:
        return ValueError(
            f"PagedKVCache: {who} needs {needed} more blocks of {self.block_size} tokens, "
            f"but only {len(self._free)} of the pool's {self.num_blocks} are free "
            "(the pool is exhausted)"
        )

    def _check_seq(self, seq: int) -> None:
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < self.batch_size:
            raise ValueError(
                f"PagedKVCache: sequence {seq!r} is not one of the {self.batch_size} sequences"
            )

    def _check_kv(
        self, what: str, k: torch.Tensor, v: torch.Tensor, shape: tuple[int | None, ...]
    ) -> None:
        """k and v must match `shape` (None: any size), each other, and the pool."""
        named = ", ".join("tokens" if s is None else str(s) for s in shape)
        for name, t in (("k", k), ("v", v)):
            if t.dim() != len(shape) or any(
                s is not None and n != s for n, s in zip(t.shape, shape, strict=True)
            ):
                raise ValueError(
                    f"PagedKVCache.{what}: {name} has shape {tuple(t.shape)}, expected ({named})"
                )
            if t.dtype != self.k.dtype or t.device != self.k.device:
                raise ValueError(
                    f"PagedKVCache.{what}: {name} is {t.dtype} on {t.device}, the cache "
                    f"holds {self.k.dtype} on {self.k.device}"
                )
        if k.shape != v.shape:
            raise ValueError(
                f"PagedKVCache.{what}: k has shape {tuple(k.shape)} but v {tuple(v.shape)}"
            )


def check_query(cache: PagedKVCache, q: torch.Tensor) -> tuple[int, int]:
    """(batch, num_heads) of q, after checking it is one query token per sequence of the
    cache, (batch, num_heads, 1, head_dim) with num_heads a multiple of the KV heads, and
    that every sequence has a key to attend."""
    batch, kv_heads, dim = cache.batch_size, cache.num_kv_heads, cache.head_dim
    if q.dim() != 4 or q.shape[0] != batch or q.shape[2] != 1 or q.shape[3] != dim:
        raise ValueError(
            f"expected q of shape ({batch}, num_heads, 1, {dim}) for the cache's {batch} "
            f"sequences, got {tuple(q.shape)}"
        )
    if q.shape[1] % kv_heads:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {kv_heads} KV heads")
    if q.dtype != cache.k.dtype or q.device != cache.k.device:
        raise ValueError(
            f"q is {q.dtype} on {q.device}, the cache holds {cache.k.dtype} on {cache.k.device}"
        )
    empty = [seq for seq, n in enumerate(cache.lengths) if n == 0]
    if empty:
        raise ValueError(f"sequences {empty} hold no tokens: a decode step needs a key")
    return batch, q.shape[1]


def prepare_gather(cache: PagedKVCache, q: torch.Tensor) -> PagedDecode:
    """Decode q (batch, num_heads, 1, head_dim) over the cache as it is now: the call
    copies each sequence's blocks, listed by the block table, into one buffer of
    (batch, num_kv_heads, keys, head_dim) (one index_select of the pool for the whole
    batch, K and V) and runs torch's fused attention on it (attention.folded_decode).
    Ragged sequences are padded to the longest, in whole blocks, and the padding masked;
    equal ones are not masked. Prepare again after appending."""
    batch, _ = check_query(cache, q)
    kv_heads, size, dim = cache.num_kv_heads, cache.block_size, cache.head_dim
    lengths = cache.lengths
    table = cache.padded_table()  # a padding entry reads block 0, whose keys the mask hides
    blocks = table.shape[1]
    index = table.reshape(-1).long()
    pools = [p.view(kv_heads, cache.num_blocks, size * dim) for p in (cache.k, cache.v)]
    buffers = [p.new_empty(kv_heads, batch * blocks, size * dim) for p in pools]
    keys, values = (b.view(kv_heads, batch, blocks * size, dim).transpose(0, 1) for b in buffers)
    mask = None
    if len(set(lengths)) == 1:
        keys, values = keys[:, :, : lengths[0]], values[:, :, : lengths[0]]
    else:
        positions = torch.arange(blocks * size, device=q.device)
        mask = positions < torch.tensor(lengths, device=q.device).unsqueeze(1)
        mask = mask.view(batch, 1, 1, blocks * size)
    (k_pool, v_pool), (k_buf, v_buf) = pools, buffers

    def decode() -> torch.Tensor:
        torch.index_select(k_pool, 1, index, out=k_buf)
        torch.index_select(v_pool, 1, index, out=v_buf)
        return folded_decode(q, keys, values, mask)

    return decode


def paged_block_mask(cache: PagedKVCache) -> BlockMask:
    """flex_attention's BlockMask for one query per sequence over the pool viewed as one
    row of num_blocks * block_size keys: sequence b sees its full blocks as they are and
    the slots of its last, partial block whose logical position is below its length.

    The mask_mod maps a physical key slot to its logical position through a table of each
    physical block's logical index in sequence b (-1: not b's), as torch's paged
    attention example does."""
    from torch.nn.attention.flex_attention import BlockMask  # loads torch._dynamo

    batch, size, pool_blocks = cache.batch_size, cache.block_size, cache.num_blocks
    device = cache.block_table.device
    lengths = torch.tensor(cache.lengths, dtype=torch.int32, device=device)
    counts = (lengths + size - 1) // size
    full = lengths // size
    table = cache.block_table.clamp(min=0)
    logical = torch.arange(pool_blocks, dtype=torch.int32, device=device).expand(batch, -1)
    owned = logical < counts.unsqueeze(1)
    physical_to_logical = torch.full_like(cache.block_table, NO_BLOCK)
    rows = torch.arange(batch, device=device).unsqueeze(1).expand(-1, pool_blocks)
    physical_to_logical[rows[owned], table[owned].long()] = logical[owned]
    last = table.gather(1, full.clamp(max=pool_blocks - 1).long().unsqueeze(1))
    partial_indices = torch.zeros_like(table)
    partial_indices[:, :1] = last

    def mask_mod(b, h, q_idx, kv_idx):
        block = physical_to_logical[b, kv_idx // size]
        return (block >= 0) & (block * size + kv_idx % size < lengths[b])

    def per_row(t: torch.Tensor) -> torch.Tensor:
        return t.view(batch, 1, 1, *t.shape[1:])  # one head row, one query row

    return BlockMask.from_kv_blocks(
        per_row(counts - full),
        per_row(partial_indices),
        per_row(full),
        per_row(table),
        BLOCK_SIZE=(1, size),
        mask_mod=mask_mod,
        seq_lengths=(1, pool_blocks * size),
    )


@functools.cache
def compiled_flex_attention() -> Callable[..., torch.Tensor]:
    """flex_attention compiled once, for static shapes: each new shape compiles again.
    `fullgraph` makes a shape past torch's recompile limit (torch._dynamo.config
    .recompile_limit, 8 by default) raise instead of falling back, unnoticed, to the
    unfused reference."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False, fullgraph=True)


def prepare_flex(cache: PagedKVCache, q: torch.Tensor, compiled: bool = True) -> PagedDecode:
    """Decode q (batch, num_heads, 1, head_dim) over the cache as it is now with torch's
    flex_attention, reading the pool in place through `paged_block_mask` (built here, outside
    the call). `compiled` False runs torch's unfused reference (it warns, and
    materialises the scores of every pool slot); compiling takes tens of seconds on the
    CPU, on the first call. Prepare again after appending."""
    from torch.nn.attention.flex_attention import flex_attention

    _, heads = check_query(cache, q)
    kv_heads, dim = cache.num_kv_heads, cache.head_dim
    mask = paged_block_mask(cache)
    keys, values = (p.view(1, kv_heads, -1, dim) for p in (cache.k, cache.v))
    attend = compiled_flex_attention() if compiled else flex_attention
    gqa = heads != kv_heads
    return lambda: attend(q, keys, values, block_mask=mask, enable_gqa=gqa)


def decode_step(
    layer: GroupedQueryAttention, x: torch.Tensor, cache: PagedKVCache, position: int, prepare
) -> Callable[[], torch.Tensor]:
    """One decode step of `layer` over a paged cache at a fixed context, as
    GroupedQueryAttention.decode_step is over a contiguous one: the returned call projects
    x (batch, 1, d_model), writes its K/V at `position` of every sequence (its slot in the
    sequence's block, through the block table) and attends the position + 1 keys with the
    decode `prepare` gives (prepare_gather or prepare_flex), then o_proj. The cache must
    hold position + 1 tokens per sequence; calling it again redoes the same step."""
    batch = x.shape[0]
    if tuple(x.shape) != (cache.batch_size, 1, layer.d_model):
        raise ValueError(
            f"expected x of shape ({cache.batch_size}, 1, {layer.d_model}), got {tuple(x.shape)}"
        )
    if set(cache.lengths) != {position + 1}:
        raise ValueError(f"the cache must hold {position + 1} tokens per sequence")
    q_proj, k_proj, v_proj, o_proj = layer.resolved_projections(x)
    heads, kv_heads, dim = layer.num_heads, layer.num_kv_heads, layer.head_dim
    q = x.new_empty(batch, heads, 1, dim)
    attend = prepare(cache, q)
    slots = cache.slots_at(position)
    k_pool, v_pool = (PagedKVCache.flat_pool(pool) for pool in (cache.k, cache.v))
    width = heads * dim

    def step() -> torch.Tensor:
        q.copy_(q_proj(x).view(batch, heads, 1, dim))
        k_pool[:, slots] = k_proj(x).view(batch, kv_heads, dim).transpose(0, 1)
        v_pool[:, slots] = v_proj(x).view(batch, kv_heads, dim).transpose(0, 1)
        return o_proj(attend().reshape(batch, 1, width))

    return step
