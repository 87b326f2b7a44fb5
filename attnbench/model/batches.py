"""Serving batches given sequence by sequence, in the grammar of vLLM's attention benchmark.

A batch spec is segments joined by `_`; each segment is

    [<count>]q<q_len>[s<kv_len>][@<seed>]      (`kv<kv_len>` may replace `s<kv_len>`)

`count` sequences (default 1), each feeding `q_len` new query tokens that attend `kv_len`
keys in all: kv_len counts the new tokens too (vLLM's "total KV cache length"), so the
context cached before the step is kv_len - q_len, and kv_len >= q_len. Without a kv_len
the segment is a prefill: kv_len = q_len. A length may end in `k` for 1024 (`2k` = 2048);
letters are read in either case.

    q2k               one prefill of 2048 tokens
    8q1s1k            eight decodes: one new token each, attending 1024 keys
    q4s1k             a speculative step: 4 query tokens
    2q2k_32q1s1k      2 prefills and 32 decodes
    q512s2k_16q1s1k   a 512-token chunk of a prefill after 1536 cached tokens, and 16 decodes

Ragged batches (an extension of the grammar): a q_len or kv_len may be a range `LOW..HIGH`
(each sequence draws an integer uniformly from LOW to HIGH, both included) or a list
`A/B/C` (each sequence draws one of them, uniformly): `8q1s128..4k` is eight decodes of
128 to 4096 keys, `8q1s512/1k/2k` eight of 512, 1024 or 2048. The draws are the same on
every run: each segment draws from its own random.Random, seeded by the segment's seed
(`@N`, default 0: `8q1s128..4k@3`) and its position in the spec, its q_lens first, then
its kv_lens. A segment whose kv_len could be drawn below its q_len is refused (its
smallest kv_len must be >= its largest q_len); a ranged prefill (`4q128..1k`) gives each
sequence kv_len = its q_len.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from ..errors import FieldError, typed
from .capacity import MAX_SEQUENCES
from .shapes import check_int

#: The longest q_len or kv_len of one sequence, in tokens.
MAX_TOKENS = 1 << 24
#: The most digits a number of a spec is read from: longer ones are refused unread.
_MAX_DIGITS = 18

_FIELD = "batch_spec"
_FORM = (
    "expected [<count>]q<q_len>[s<kv_len>] segments joined by _, e.g. 8q1s1k, q2k or 2q2k_32q1s1k"
)
_POSITIVE = "counts and lengths must be >= 1"
_LENGTH = r"[0-9]+k?"
_LENGTHS = rf"{_LENGTH}(?:\.\.{_LENGTH}|(?:/{_LENGTH})*)"
_SEGMENT = re.compile(
    rf"(?P<count>[0-9]+)?q(?P<q>{_LENGTHS})(?:(?:s|kv)(?P<kv>{_LENGTHS}))?(?:@(?P<seed>[0-9]+))?"
)

#: Makes the FieldError of one segment from a reason.
_Error = Callable[[str], FieldError]


@dataclass(frozen=True)
class Sequence:
    """One sequence of a batch step: `q_len` new query tokens attending `kv_len` keys, the
    new ones included."""

    q_len: int
    kv_len: int

    def __post_init__(self) -> None:
        check_int("q_len", self.q_len)
        check_int("kv_len", self.kv_len, minimum=self.q_len)

    @property
    def context_len(self) -> int:
        """Tokens cached before the step."""
        return self.kv_len - self.q_len


@dataclass(frozen=True)
class BatchSpec:
    """A batch as typed (`text`, which parse_batch reads back to the same batch) and its
    sequences, in the order of the spec. Its sizes are computed once (a batch may hold a
    million sequences)."""

    text: str
    sequences: tuple[Sequence, ...]

    def __post_init__(self) -> None:
        if not self.sequences:
            raise ValueError("a batch holds at least one sequence")

    def __str__(self) -> str:
        return self.text

    @cached_property
    def batch_size(self) -> int:
        """Sequences in the batch."""
        return len(self.sequences)

    @cached_property
    def query_tokens(self) -> int:
        """New query tokens over all sequences."""
        return sum(s.q_len for s in self.sequences)

    @cached_property
    def kv_tokens(self) -> int:
        """Keys attended over all sequences: the tokens the cache holds after the step."""
        return sum(s.kv_len for s in self.sequences)

    @cached_property
    def max_kv_len(self) -> int:
        return max(s.kv_len for s in self.sequences)

    @cached_property
    def max_context_len(self) -> int:
        """The longest context cached before the step."""
        return max(s.context_len for s in self.sequences)

    @cached_property
    def is_uniform(self) -> bool:
        """Every sequence has the same q_len and kv_len."""
        return len(set(self.sequences)) == 1

    @cached_property
    def is_decode_only(self) -> bool:
        """Every sequence feeds one new token."""
        return all(s.q_len == 1 for s in self.sequences)


@dataclass(frozen=True)
class _Lengths:
    """What one sequence's q_len or kv_len is drawn from: one of `choices`, or any integer
    from `low` to `high` when `choices` is None."""

    low: int
    high: int
    choices: tuple[int, ...] | None

    def draw(self, rng: random.Random, count: int) -> list[int]:
        if self.low == self.high:
            return [self.low] * count
        if self.choices is None:
            return [rng.randint(self.low, self.high) for _ in range(count)]
        return [rng.choice(self.choices) for _ in range(count)]


@dataclass(frozen=True)
class _Segment:
    count: int
    q: _Lengths
    kv: _Lengths | None  # None: a prefill, kv_len = q_len
    seed: int

    def sequences(self, position: int) -> list[Sequence]:
        rng = random.Random(f"{_FIELD}:{self.seed}:{position}")
        q_lens = self.q.draw(rng, self.count)
        kv_lens = q_lens if self.kv is None else self.kv.draw(rng, self.count)
        pairs = list(zip(q_lens, kv_lens, strict=True))
        made = {pair: Sequence(*pair) for pair in set(pairs)}  # one object per distinct pair
        return [made[pair] for pair in pairs]


def parse_batch(text: str) -> BatchSpec:
    """The batch `text` describes (see the module docstring); FieldError naming
    `batch_spec` for anything else. The number of sequences is checked against
    capacity.MAX_SEQUENCES before any is built."""
    stripped = text.strip()
    if not stripped:
        raise FieldError(_FIELD, typed(text), f"empty; {_FORM}")
    pieces = stripped.split("_")
    segments = [_segment(text, piece, len(pieces) > 1) for piece in pieces]
    total = sum(s.count for s in segments)
    if total > MAX_SEQUENCES:
        reason = f"more than {MAX_SEQUENCES:,} sequences in one batch ({total:,})"
        raise FieldError(_FIELD, typed(text), reason)
    sequences = [seq for i, segment in enumerate(segments) for seq in segment.sequences(i)]
    return BatchSpec(stripped, tuple(sequences))


def _segment(text: str, piece: str, several: bool) -> _Segment:
    def error(reason: str) -> FieldError:
        where = f"in segment {piece!r}: " if several else ""
        return FieldError(_FIELD, typed(text), where + reason)

    match = _SEGMENT.fullmatch(piece.lower())
    if match is None:
        raise error(_POSITIVE if "-" in piece else _FORM)
    count_text, seed_text = match["count"], match["seed"]
    too_many = f"more than {MAX_SEQUENCES:,} sequences in one batch"
    count = _int(count_text, MAX_SEQUENCES, error, too_many) if count_text else 1
    if count < 1:
        raise error(_POSITIVE)
    q = _lengths(match["q"], error)
    kv = None if match["kv"] is None else _lengths(match["kv"], error)
    if kv is not None and kv.low < q.high:
        raise error(
            f"kv_len {kv.low} < q_len {q.high}: kv_len counts every key attended, "
            "the q_len new tokens included"
        )
    seed_limit = 10**_MAX_DIGITS - 1
    seed = _int(seed_text, seed_limit, error, f"seeds must be <= {seed_limit}") if seed_text else 0
    return _Segment(count, q, kv, seed)


def _lengths(text: str, error: _Error) -> _Lengths:
    """A length, a range LOW..HIGH or a list A/B/C."""
    if ".." in text:
        low_text, _, high_text = text.partition("..")
        low, high = _length(low_text, error), _length(high_text, error)
        if low > high:
            raise error(f"range {text}: LOW must be <= HIGH")
        return _Lengths(low, high, None)
    choices = tuple(_length(part, error) for part in text.split("/"))
    return _Lengths(min(choices), max(choices), choices)


def _length(text: str, error: _Error) -> int:
    """One length, from 1 to MAX_TOKENS; `k` multiplies by 1024."""
    unit = 1024 if text.endswith("k") else 1
    too_long = f"lengths must be <= {MAX_TOKENS:,} tokens"
    value = _int(text.removesuffix("k"), MAX_TOKENS // unit, error, too_long) * unit
    if value < 1:
        raise error(_POSITIVE)
    return value


def _int(digits: str, limit: int, error: _Error, too_big: str) -> int:
    """`digits` as an integer, or `too_big` above `limit` (a long text is refused unread:
    int() refuses thousands of digits)."""
    if len(digits) > _MAX_DIGITS or int(digits) > limit:
        raise error(too_big)
    return int(digits)
