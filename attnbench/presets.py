"""Model presets: the attention architecture of real models, from their published configs."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .analytic import AttentionShape
from .errors import UsageError


@dataclass(frozen=True)
class ModelSpec:
    """The architecture attnbench needs of a model: its attention layers and their count."""

    name: str
    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    source: str

    def attention_shape(self, bias: bool = False) -> AttentionShape:
        return AttentionShape(
            self.d_model, self.num_heads, self.num_kv_heads, self.head_dim, bias=bias
        )

    @property
    def variant(self) -> str:
        return self.attention_shape().variant


def _spec(name, layers, d_model, heads, kv_heads, head_dim, dtype, source) -> ModelSpec:
    return ModelSpec(name, layers, d_model, heads, kv_heads, head_dim, dtype, source)


# fmt: off
PRESETS: dict[str, ModelSpec] = {p.name: p for p in (
    # name           layers d_model heads kv head_dim dtype
    _spec("llama-2-7b",   32, 4096, 32, 32, 128, "float16",
          "meta-llama/Llama-2-7b-hf config.json"),
    _spec("llama-2-13b",  40, 5120, 40, 40, 128, "float16",
          "meta-llama/Llama-2-13b-hf config.json"),
    _spec("llama-2-70b",  80, 8192, 64,  8, 128, "float16",
          "meta-llama/Llama-2-70b-hf config.json"),
    _spec("llama-3-8b",   32, 4096, 32,  8, 128, "bfloat16",
          "meta-llama/Meta-Llama-3-8B config.json"),
    _spec("llama-3-70b",  80, 8192, 64,  8, 128, "bfloat16",
          "meta-llama/Meta-Llama-3-70B config.json"),
    _spec("mistral-7b",   32, 4096, 32,  8, 128, "bfloat16",
          "mistralai/Mistral-7B-v0.1 config.json"),
    _spec("mixtral-8x7b", 32, 4096, 32,  8, 128, "bfloat16",
          "mistralai/Mixtral-8x7B-v0.1 config.json"),
    _spec("falcon-7b",    32, 4544, 71,  1,  64, "bfloat16",
          "tiiuae/falcon-7b config.json (multi_query: true)"),
    _spec("qwen2.5-7b",   28, 3584, 28,  4, 128, "bfloat16",
          "Qwen/Qwen2.5-7B config.json"),
    _spec("gemma-7b",     28, 3072, 16, 16, 256, "bfloat16",
          "google/gemma-7b config.json (head_dim 256 != d_model / heads)"),
    _spec("gpt3-175b",    96, 12288, 96, 96, 128, "float16",
          "Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1"),
)}
# fmt: on


def closest(name: str, choices) -> str:
    """' (did you mean X?)' for the closest choice, or '' when nothing is close."""
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def get_preset(name: str, field: str = "--model") -> ModelSpec:
    """The preset called `name` (case-insensitive); UsageError suggests the closest name."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise UsageError(f"{field}: unknown model {name!r}{closest(key, PRESETS)}")
    return PRESETS[key]
