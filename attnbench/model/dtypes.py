"""Element types by name: bits per element, the torch dtype their values are stored as,
and what they may be used for. The one table every formula, module and check reads; the
torch objects themselves are looked up by `storage` in the measure layer."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FieldError, closest


@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    #: The torch dtype (by name) that holds the values: int4 is packed two per uint8.
    storage: str
    #: Weights and activations may use it (float32, float16, bfloat16).
    model: bool = False
    #: A KV cache in it stores quantisation scales beside its values.
    quantized: bool = False


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", 32, "float32", model=True),
        DType("float16", 16, "float16", model=True),
        DType("bfloat16", 16, "bfloat16", model=True),
        DType("float8_e4m3fn", 8, "float8_e4m3fn", quantized=True),
        DType("float8_e5m2", 8, "float8_e5m2", quantized=True),
        DType("int8", 8, "int8", quantized=True),
        DType("int4", 4, "uint8", quantized=True),
        # Block-scaled 4-bit floats (e2m1) for weights, two to a byte: MXFP4 (OCP
        # microscaling) and NVFP4 (NVIDIA's); their scales are weights.py's.
        DType("mxfp4", 4, "uint8"),
        DType("nvfp4", 4, "uint8"),
    )
}

#: dtypes a model (weights and activations) may use.
MODEL_DTYPES: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if d.model)
#: Element types a KV cache (or a model's weights, for capacity planning) may use.
KV_DTYPES: tuple[str, ...] = (
    "float16",
    "bfloat16",
    "float32",
    *(n for n, d in DTYPES.items() if d.quantized),
)
#: KV dtypes that store scales beside their values.
QUANTIZED_KV_DTYPES: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if d.quantized)
#: dtypes a quantisation scale may use.
SCALE_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")

#: Other spellings found in config.json files and serving engines' flags (vLLM's
#: kv-cache-dtype fp8 is e4m3, as is float8 in their quantisers).
ALIASES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "half": "float16",
    "float": "float32",
    "fp8": "float8_e4m3fn",
    "float8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}


#: Where serving engines load a float32 checkpoint in 16 bits: vLLM's `--dtype auto`
#: takes the platform's first dtype, bfloat16 on GPUs that have it
#: (`_resolve_auto_dtype`, "Downcast for float32 models"); no engine serves in float32.
SERVED_DTYPE_SOURCE = (
    "https://github.com/vllm-project/vllm/blob/0052a5b818980ce8a0477706aaf9f75bd5af72cd/"
    "vllm/config/model.py"
)


def served_dtype(dtype: str) -> str:
    """The dtype a serving engine runs a checkpoint stored in `dtype` in: a float32
    checkpoint in bfloat16 (SERVED_DTYPE_SOURCE; float16, which older engines took, has
    the same matmul rate on every GPU of the table), any other as stored."""
    return "bfloat16" if dtype == "float32" else dtype


def canonical_dtype(name: str) -> str | None:
    """'torch.bfloat16', 'bf16' -> 'bfloat16'; None for a name no table knows."""
    text = str(name).removeprefix("torch.")
    text = ALIASES.get(text, text)
    return text if text in DTYPES else None


def check_dtype(name: str, field: str, choices: tuple[str, ...]) -> str:
    """`name` if it is one of `choices`, else a FieldError naming them."""
    if name not in choices:
        raise FieldError(
            field, name, f"unknown dtype{closest(name, choices)}; choose from {', '.join(choices)}"
        )
    return name


def dtype_bits(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype].bits


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a whole-byte dtype name ("float16" -> 2)."""
    bits = dtype_bits(dtype)
    if bits % 8:
        raise ValueError(f"dtype {dtype!r} has {bits} bits per element, not whole bytes")
    return bits // 8


def packed_bytes(elements: int, dtype: str) -> int:
    """Bytes of `elements` values of `dtype` packed densely: ceil(elements * bits / 8)."""
    return -(-elements * dtype_bits(dtype) // 8)
