"""Model presets: the architecture of real models, from their published configs."""

from __future__ import annotations

from ..errors import FieldError, closest
from ..model.architecture import MlaSpec, ModelBody, ModelSpec, MoeSpec, StoredWeights

__all__ = ["PRESETS", "ModelSpec", "get_preset"]


def _spec(name, layers, d_model, heads, kv_heads, head_dim, dtype, source, **extra) -> ModelSpec:
    return ModelSpec(name, layers, d_model, heads, kv_heads, head_dim, dtype, source, **extra)


def _llama(vocab: int, inter: int, context: int, **body) -> dict:
    """A Llama-style body: gated (SwiGLU) MLP, RMSNorm, no biases, untied head."""
    return {"body": ModelBody(vocab, inter, **body), "max_position_embeddings": context}


def _deepseek(vocab, inter, experts, top_k, expert_inter, shared, dense, q_lora, router_bias):
    return {
        "mla": MlaSpec(
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            q_lora_rank=q_lora,
        ),
        "body": ModelBody(
            vocab, inter, moe=MoeSpec(experts, top_k, expert_inter, shared, dense, router_bias)
        ),
        "max_position_embeddings": 163840,
    }


_GEMMA2 = "sliding window 4096 on even layers, global on odd"
#: Llama 3.1's positions: Llama 3's 8,192 stretched 8x by its RoPE scaling.
_LLAMA31 = (
    "128k context: rope_scaling llama3, factor 8 over original_max_position_embeddings "
    "8192, rope_theta 500000"
)

# Kept as a table (one preset a line, in the columns of the published configs).
# fmt: off
PRESETS: dict[str, ModelSpec] = {p.name: p for p in (
    # name           layers d_model heads kv head_dim dtype
    _spec("llama-2-7b",   32, 4096, 32, 32, 128, "float16",
          "meta-llama/Llama-2-7b-hf config.json", **_llama(32000, 11008, 4096)),
    _spec("llama-2-13b",  40, 5120, 40, 40, 128, "float16",
          "meta-llama/Llama-2-13b-hf config.json", **_llama(32000, 13824, 4096)),
    _spec("llama-2-70b",  80, 8192, 64,  8, 128, "float16",
          "meta-llama/Llama-2-70b-hf config.json", **_llama(32000, 28672, 4096)),
    _spec("llama-3-8b",   32, 4096, 32,  8, 128, "bfloat16",
          "meta-llama/Meta-Llama-3-8B config.json", **_llama(128256, 14336, 8192)),
    _spec("llama-3-70b",  80, 8192, 64,  8, 128, "bfloat16",
          "meta-llama/Meta-Llama-3-70B config.json", **_llama(128256, 28672, 8192)),
    _spec("llama-3.1-8b", 32, 4096, 32,  8, 128, "bfloat16",
          f"meta-llama/Llama-3.1-8B config.json ({_LLAMA31})", **_llama(128256, 14336, 131072)),
    _spec("llama-3.1-70b", 80, 8192, 64, 8, 128, "bfloat16",
          f"meta-llama/Llama-3.1-70B config.json ({_LLAMA31})", **_llama(128256, 28672, 131072)),
    _spec("mistral-7b",   32, 4096, 32,  8, 128, "bfloat16",
          "mistralai/Mistral-7B-v0.1 config.json (sliding_window 4096 on every layer)",
          windows=(4096,) * 32, **_llama(32000, 14336, 32768)),
    _spec("mixtral-8x7b", 32, 4096, 32,  8, 128, "bfloat16",
          "mistralai/Mixtral-8x7B-v0.1 config.json",
          **_llama(32000, 14336, 32768, moe=MoeSpec(8, 2, 14336))),
    _spec("falcon-7b",    32, 4544, 71,  1,  64, "bfloat16",
          "tiiuae/falcon-7b config.json (multi_query: true, parallel attention, one LayerNorm)",
          body=ModelBody(65024, 4 * 4544, gated_mlp=False, norm_bias=True, norms_per_layer=1,
                         tied_embeddings=True),
          max_position_embeddings=2048),
    _spec("qwen2.5-7b",   28, 3584, 28,  4, 128, "bfloat16",
          "Qwen/Qwen2.5-7B config.json (use_sliding_window: false)",
          **_llama(152064, 18944, 131072, qkv_bias=True)),
    _spec("gemma-7b",     28, 3072, 16, 16, 256, "bfloat16",
          "google/gemma-7b config.json (head_dim 256 != d_model / heads)",
          **_llama(256000, 24576, 8192, tied_embeddings=True)),
    _spec("gemma-2-9b",   42, 3584, 16,  8, 256, "bfloat16",
          f"google/gemma-2-9b config.json ({_GEMMA2})", windows=(4096, None) * 21,
          **_llama(256000, 14336, 8192, tied_embeddings=True, norms_per_layer=4)),
    _spec("gemma-2-27b",  46, 4608, 32, 16, 128, "bfloat16",
          f"google/gemma-2-27b config.json ({_GEMMA2})", windows=(4096, None) * 23,
          **_llama(256000, 36864, 8192, tied_embeddings=True, norms_per_layer=4)),
    _spec("deepseek-v2-lite", 27, 2048, 16, 16, 128, "bfloat16",
          "deepseek-ai/DeepSeek-V2-Lite config.json (MLA, 64 routed + 2 shared experts)",
          **_deepseek(102400, 10944, 64, 6, 1408, 2, 1, None, False)),
    _spec("deepseek-v2",  60, 5120, 128, 128, 128, "bfloat16",
          "deepseek-ai/DeepSeek-V2 config.json (MLA, 160 routed + 2 shared experts)",
          **_deepseek(102400, 12288, 160, 6, 1536, 2, 1, 1536, False)),
    _spec("deepseek-v3",  61, 7168, 128, 128, 128, "bfloat16",
          "deepseek-ai/DeepSeek-V3 config.json (MLA, 256 routed + 1 shared expert; "
          "without the multi-token-prediction layer; weights stored in float8, blocks of "
          "128 x 128, as its quantization_config says, counted with a scale per output "
          "channel)",
          stored_weights=StoredWeights("float8_e4m3fn"),
          **_deepseek(129280, 18432, 256, 8, 2048, 1, 3, 1536, True)),
    _spec("gpt3-175b",    96, 12288, 96, 96, 128, "float16",
          "Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1",
          body=ModelBody(50257, 4 * 12288, gated_mlp=False, mlp_bias=True, qkv_bias=True,
                         o_bias=True, norm_bias=True, tied_embeddings=True,
                         position_embeddings=2048),
          max_position_embeddings=2048),
)}
# fmt: on


def get_preset(name: str) -> ModelSpec:
    """The preset called `name` (case-insensitive); FieldError suggests the closest name."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise FieldError("model", name, f"unknown model{closest(key, PRESETS)}")
    return PRESETS[key]
