"""The shape of one attention layer, and the name of its variant."""

from __future__ import annotations

from dataclasses import dataclass


def variant_label(num_heads: int, num_kv_heads: int) -> str:
    """`MHA` when every query head has its own KV head, `MQA` when all share one, else GQA-n."""
    if num_kv_heads == num_heads:
        return "MHA"
    if num_kv_heads == 1:
        return "MQA"
    return f"GQA-{num_kv_heads}"


@dataclass(frozen=True)
class AttentionShape:
    """The hyper-parameters of one attention layer; validated on construction."""

    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    bias: bool = False

    def __post_init__(self) -> None:
        for name in ("d_model", "num_heads", "num_kv_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.head_dim is None:
            if self.d_model % self.num_heads:
                raise ValueError(
                    f"num_heads {self.num_heads} does not divide d_model {self.d_model}; "
                    "set head_dim explicitly"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.num_heads)
        elif (
            isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int)
        ) or self.head_dim <= 0:
            raise ValueError(f"head_dim must be a positive integer, got {self.head_dim!r}")
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
    def q_dim(self) -> int:
        """Width of the concatenated query heads, Hq*D."""
        return self.num_heads * self.head_dim  # type: ignore[operator]

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated KV heads, Hkv*D."""
        return self.num_kv_heads * self.head_dim  # type: ignore[operator]
