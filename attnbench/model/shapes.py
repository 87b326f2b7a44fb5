"""The shape of one attention layer, and the name of its variant."""

from __future__ import annotations

from dataclasses import dataclass


def check_int(name: str, value: object, minimum: int = 1) -> int:
    """`value` if it is an integer >= `minimum` (a bool is none), else a ValueError:
    "{name} must be a positive integer, got ..." (or "an integer >= {minimum}")."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


def variant_label(num_heads: int, num_kv_heads: int) -> str:
    """`MHA` when every query head has its own KV head, `MQA` when all share one, else GQA-n."""
    if num_kv_heads == num_heads:
        return "MHA"
    if num_kv_heads == 1:
        return "MQA"
    return f"GQA-{num_kv_heads}"


def shape_label(d_model: int, num_heads: int, num_kv_heads: int) -> str:
    """A layer shape in a few characters: 'd4096 h32/8'."""
    return f"d{d_model} h{num_heads}/{num_kv_heads}"


@dataclass(frozen=True)
class AttentionShape:
    """The hyper-parameters of one attention layer; validated on construction. `bias`:
    biases on q, k and v, and on o unless `o_bias` says otherwise (Qwen2: q, k, v only)."""

    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    bias: bool = False
    o_bias: bool | None = None

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "num_kv_heads"):
            check_int(name, getattr(self, name))
        if self.head_dim is not None:
            check_int("head_dim", self.head_dim)
        elif self.d_model % self.num_heads:
            raise ValueError(
                f"num_heads {self.num_heads} does not divide d_model {self.d_model}; "
                "set head_dim explicitly"
            )
        else:
            object.__setattr__(self, "head_dim", self.d_model // self.num_heads)
        if self.num_kv_heads > self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads {self.num_kv_heads} does not divide num_heads {self.num_heads}"
            )

    @property
    def group_size(self) -> int:
        """Query heads per KV head (G)."""
        return self.num_heads // self.num_kv_heads

    @property
    def variant(self) -> str:
        return variant_label(self.num_heads, self.num_kv_heads)

    @property
    def out_bias(self) -> bool:
        """Whether o_proj has a bias."""
        return self.bias if self.o_bias is None else self.o_bias

    @property
    def biases(self) -> str:
        """Which projections carry a bias, as a table says it: 'bias' (all four), 'no
        bias', 'q/k/v bias', 'o bias'."""
        if self.bias == self.out_bias:
            return "bias" if self.bias else "no bias"
        return "q/k/v bias" if self.bias else "o bias"

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads, Hq*D."""
        return self.num_heads * self.head_dim  # type: ignore[operator]

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated KV heads, Hkv*D."""
        return self.num_kv_heads * self.head_dim  # type: ignore[operator]
