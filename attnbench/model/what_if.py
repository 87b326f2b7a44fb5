"""What-if variants of a model: the same model rebuilt with other KV-head counts, to answer
"what would this model cost as MHA, or as MQA?" beside the model as published.

A count is an integer or a word: `mha` (one KV head per query head) or `mqa` (one KV head
for all). Everything else of the model stays: its layers, windows, head_dim, vocabulary,
MLP or experts. Only the k and v projections and the cache change with the count.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import FieldError
from .architecture import ModelSpec

#: KV-head counts given by name: a function of the query heads.
KV_HEAD_WORDS = {"mha": lambda heads: heads, "mqa": lambda heads: 1}


def kv_heads_meant(value: int | str, num_heads: int) -> int:
    """`value` (an integer, 'mha' or 'mqa') as a count of KV heads for `num_heads` query
    heads, unchecked (see kv_heads_count)."""
    return KV_HEAD_WORDS[value](num_heads) if isinstance(value, str) else value


def kv_heads_count(value: int | str, num_heads: int, model: str | None = None) -> int:
    """`value` (an integer, 'mha' or 'mqa') as a count of KV heads for `num_heads` query
    heads; FieldError when it does not divide them (naming `model` when there is one)."""
    count = kv_heads_meant(value, num_heads)
    if num_heads % count:
        whose = f"{model}'s" if model else "the"
        raise FieldError(
            "num_kv_heads", value, f"does not divide {whose} {num_heads:,} query heads"
        )
    return count


def what_if_specs(spec: ModelSpec, values: list[int | str]) -> list[ModelSpec]:
    """`spec` rebuilt with each KV-head count in `values`, in their order, with the model's
    own count among them (first when `values` leaves it out), each count once. Every spec
    returned, the model's own included, carries `published_kv_heads`: what marks it as one
    of a what-if set, and its own row as the one whose count equals it."""
    if spec.mla is not None:
        raise FieldError(
            "num_kv_heads",
            values[0],
            f"{spec.name} uses MLA: its cache holds one latent per token, shared by every "
            "head, so there are no KV heads to change",
        )
    own = spec.num_kv_heads
    counts = [kv_heads_count(v, spec.num_heads, spec.name) for v in values]
    if own not in counts:
        counts.insert(0, own)
    unique = list(dict.fromkeys(counts))
    return [replace(spec, num_kv_heads=k, published_kv_heads=own) for k in unique]


#: How the model's own row of a what-if set is marked: 'GQA-8 (own)'.
OWN_MARK = " (own)"


def is_own(num_kv_heads: int | None, published_kv_heads: int | None) -> bool:
    """Whether a row of a what-if set is the model as published."""
    return published_kv_heads is not None and num_kv_heads == published_kv_heads


def is_what_if(num_kv_heads: int | None, published_kv_heads: int | None) -> bool:
    """Whether a row is a variant rebuilt from the model, not the model as published."""
    return published_kv_heads is not None and num_kv_heads != published_kv_heads
