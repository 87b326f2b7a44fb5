"""How a model's weights are stored: their element type and, when quantised, their scales;
and the dtype its matmuls run in, which sets their peak.

- 16- and 32-bit weights (float32, float16, bfloat16) are the model's own: no scales.
- int8 and int4 are weight-only quantisation (W8A16, W4A16: GPTQ, AWQ, gpt-fast,
  bitsandbytes, Marlin kernels): the weights are dequantised in the kernel and the
  matmuls run in the activations' dtype, at its peak. Each group of `group` input
  elements of a weight row keeps one scale (16 bits) and, for int4, one zero point (16
  bits, as gpt-fast and HQQ store them; GPTQ and AWQ pack theirs in 4 bits, 0.1 bit per
  weight less at groups of 128). The default group is 128 for int4, the common choice of
  GPTQ and AWQ checkpoints, and one scale per output channel (a whole row of d_model
  inputs) for int8.
- float8 (e4m3 or e5m2) weights go with float8 activations (W8A8-FP8, the way 70B models
  are served on Hopper): one scale per output channel, and the matmuls run at the
  device's float8 peak, so a device without float8 tensor cores has no peak for them.
- 4-bit floats (e2m1) scaled in blocks, whose format fixes the block: mxfp4 (OCP
  microscaling, an 8-bit power-of-two scale per 32 inputs) is weight-only, dequantised in
  the kernel as Hopper's and CDNA3's MXFP4 kernels run it (gpt-oss); nvfp4 (an 8-bit float8
  scale per 16 inputs) goes with nvfp4 activations (W4A4) at the device's float4 peak,
  which Blackwell's tensor cores have and Hopper's have not. NVFP4's one float32 scale per
  tensor (4 bytes a matrix) is left out.

Quantised weights leave the embeddings and the output head in the activations' dtype, as
GPTQ, AWQ and float8 checkpoints keep them, unless `quantized_head`: the head is quantised
with the rest, as gpt-fast's and torchao's quantisers replace every linear layer (a head
tied to the embeddings stays in their dtype: the lookup reads the table). With
`kept_attention` the attention's projections stay in the activations' dtype too, their
matmuls at its rate, as the 4-bit checkpoints of mixtures of experts keep them (gpt-oss's
MXFP4 quantises its experts alone, NVIDIA's DeepSeek-R1-FP4 its MLPs and experts).

A weight-only kernel multiplies at small batches on the CUDA cores (a GEMV that dequantises
as it reads: gpt-fast's int8, MLC's, TensorRT-LLM's weight-only GEMV), untiled, by default;
or, `weight_only_kernel` "tensor-cores", on the tensor cores as Marlin does (vLLM's and
SGLang's GPTQ and AWQ kernels): dequantised into registers, then multiplied by mma.sync
m16n8k16, whose M is the tokens, so a step of fewer tokens computes the rest of its 16
rows as zeros (model/roofline.py, WEIGHT_ONLY_TILE).

Under tensor parallelism the vocabulary (the token embeddings and the output head) is
split over the ranks, each computing its share of the logits, which are then gathered
(vLLM, TensorRT-LLM, SGLang), or replicated: each rank holds the whole vocabulary and
computes every logit itself, with nothing to gather (gpt-fast shards only the attention
and the MLP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import FieldError
from .capacity import ceil_div, positive_int
from .dtypes import MODEL_DTYPES, check_dtype, dtype_bytes, packed_bytes

#: The dtypes a model's weights may be stored in.
WEIGHT_DTYPES: tuple[str, ...] = (
    *MODEL_DTYPES,
    "int8",
    "int4",
    "float8_e4m3fn",
    "float8_e5m2",
    "mxfp4",
    "nvfp4",
)
#: Weight-only quantisation: the matmuls run in the activations' dtype.
WEIGHT_ONLY = ("int8", "int4", "mxfp4")
#: Quantised weights whose matmuls run in their own dtype, with the activations quantised too.
WEIGHT_AND_ACTIVATION = ("float8_e4m3fn", "float8_e5m2", "nvfp4")
#: The scale group of int4 weights when none is given (GPTQ's and AWQ's usual 128).
DEFAULT_INT4_GROUP = 128
#: The inputs one scale covers in the block-scaled 4-bit formats, fixed by each format.
BLOCKS = {"mxfp4": 32, "nvfp4": 16}
#: Quantised weights, and of them those whose scale group a weights_group sets.
QUANTIZED = (*WEIGHT_ONLY, *WEIGHT_AND_ACTIVATION)
#: The float8 formats (weights and activations), which need a GPU's float8 rate.
FLOAT8_WEIGHTS = tuple(d for d in WEIGHT_AND_ACTIVATION if d.startswith("float8"))
GROUPED = tuple(d for d in QUANTIZED if d not in BLOCKS)
#: Bits of one scale (and of one int4 zero point): 16, or the block formats' 8.
SCALE_BITS = 16
BLOCK_SCALE_BITS = 8
#: How describe() says the attention is kept (a record's weights, as reports read them).
KEPT_ATTENTION = ", the attention kept"
#: How describe() says the head is quantised with the rest.
QUANTIZED_HEAD = ", the head too"
#: The peak a W4A4 matmul runs at (nvfp4 activations times nvfp4 weights).
FLOAT4_PEAK = "float4"
#: How tensor-parallel ranks hold the vocabulary: split over them, or whole on each.
VOCAB_LAYOUTS = ("split", "replicated")
#: Where a weight-only kernel multiplies: on the CUDA cores, untiled (the default), or on
#: the tensor cores in tiles of tokens (Marlin's).
WEIGHT_ONLY_KERNELS = ("cuda-cores", "tensor-cores")
#: How describe() says a weight-only kernel multiplies on the tensor cores.
ON_TENSOR_CORES = ", on the tensor cores"


@dataclass(frozen=True)
class WeightFormat:
    """Weights in `dtype`; for quantised ones, one scale per `group` input elements of a
    row (None: the dtype's default, see the module's notes); the output head kept in the
    activations' dtype or, `quantized_head`, quantised too; the vocabulary split over
    tensor-parallel ranks or, `replicated_vocab`, whole on each; weight-only weights
    multiplied on the CUDA cores or, `tensor_core_kernel`, on the tensor cores."""

    dtype: str
    group: int | None = None
    replicated_vocab: bool = False
    quantized_head: bool = False
    kept_attention: bool = False
    tensor_core_kernel: bool = False

    def __post_init__(self) -> None:
        check_dtype(self.dtype, "weights_dtype", WEIGHT_DTYPES)
        if self.group is not None:
            positive_int("weights_group", self.group)
            if not self.quantized:
                raise FieldError(
                    "weights_group", self.group, f"{self.dtype} weights have no scales"
                )
            block = BLOCKS.get(self.dtype, self.group)
            if self.group != block:
                reason = f"{self.dtype} scales blocks of {block} inputs: its format fixes them"
                raise FieldError("weights_group", self.group, reason)
        if self.quantized_head and not self.quantized:
            raise FieldError(
                "quantize_head", True, f"{self.dtype} weights are not quantised: nor is the head"
            )
        if self.kept_attention and not self.quantized:
            raise FieldError(
                "keep_attention",
                True,
                f"{self.dtype} weights are not quantised: the attention is kept as they are",
            )
        if self.tensor_core_kernel and self.dtype not in WEIGHT_ONLY:
            raise FieldError(
                "weight_only_kernel",
                "tensor-cores",
                f"{self.dtype} weights are not weight-only: their matmuls are the tensor cores'",
            )

    @classmethod
    def of(
        cls,
        dtype: str,
        group: int | None = None,
        vocab: str = "split",
        quantize_head: bool = False,
        keep_attention: bool = False,
        weight_only_kernel: str = "cuda-cores",
    ) -> WeightFormat:
        """Weights in `dtype`, with `group`, the head quantised too (`quantize_head`) and
        the attention kept (`keep_attention`) where they are quantised, multiplied where
        `weight_only_kernel` says (WEIGHT_ONLY_KERNELS) where they are weight-only (a sweep
        of several weights dtypes gives each option to the dtypes it applies to only, and
        the group to those whose format does not fix it), the vocabulary laid out as
        `vocab` says (VOCAB_LAYOUTS)."""
        if vocab not in VOCAB_LAYOUTS:
            raise FieldError("vocab_layout", vocab, f"choose from {', '.join(VOCAB_LAYOUTS)}")
        if weight_only_kernel not in WEIGHT_ONLY_KERNELS:
            reason = f"choose from {', '.join(WEIGHT_ONLY_KERNELS)}"
            raise FieldError("weight_only_kernel", weight_only_kernel, reason)
        quantized = dtype in QUANTIZED
        return cls(
            dtype,
            group if dtype in GROUPED else None,
            vocab == "replicated",
            quantize_head and quantized,
            keep_attention and quantized,
            weight_only_kernel == "tensor-cores" and dtype in WEIGHT_ONLY,
        )

    @classmethod
    def of_point(cls, dtype: str, point: Any) -> WeightFormat:
        """Weights in `dtype` with the weights options of a predict or fit point (its
        weights_group, vocab_layout, quantize_head, keep_attention, weight_only_kernel)."""
        return cls.of(
            dtype,
            point.weights_group,
            vocab=point.vocab_layout,
            quantize_head=point.quantize_head,
            keep_attention=point.keep_attention,
            weight_only_kernel=point.weight_only_kernel,
        )

    @property
    def quantized(self) -> bool:
        return self.dtype in QUANTIZED

    @property
    def takes_group(self) -> bool:
        """A scale group may be set: quantised weights, but for a block format's fixed
        blocks."""
        return self.dtype in GROUPED

    def scaled(self, own_head: bool = False) -> frozenset[str]:
        """What of these weights carries scales, as the sections' scaled() name it:
        "weights" where quantised, "head" where they are and the model's output head is
        its own (`own_head`: not tied to the embeddings, which stay in the activations'
        dtype), "weights group" where a scale group may be set, and "weight-only
        weights" where a weight-only kernel multiplies them."""
        named = {
            "weights": self.quantized,
            "head": self.quantized and own_head,
            "weights group": self.takes_group,
            "weight-only weights": self.dtype in WEIGHT_ONLY,
        }
        return frozenset(name for name, carries in named.items() if carries)

    @property
    def dequant_ops(self) -> int:
        """Operations on the CUDA cores (not the tensor cores) that turn one stored weight
        into the activations' dtype inside a weight-only kernel: int8, a conversion and a
        multiply by its scale (2); int4, a shift and a mask to unpack it, a conversion,
        the zero point's subtraction and the scale's multiply (5); mxfp4, a shift and a
        mask, the 4-bit float's conversion and the scale's multiply (4); none for weights
        stored in a dtype the tensor cores take."""
        return {"int8": 2, "int4": 5, "mxfp4": 4}.get(self.dtype, 0)

    def activation_quant_bytes(self, activations: str) -> float:
        """Bytes that quantising one activation element before a matmul moves: for
        float8 weights (W8A8), the element read in the activations' dtype and written in
        float8; for nvfp4 (W4A4), written in 4 bits with an 8-bit scale per block of 16;
        none otherwise."""
        if self.dtype not in WEIGHT_AND_ACTIVATION:
            return 0
        if self.dtype in BLOCKS:
            return dtype_bytes(activations) + 0.5 + BLOCK_SCALE_BITS / 8 / BLOCKS[self.dtype]
        return dtype_bytes(activations) + 1

    def matmul_dtype(self, activations: str) -> str:
        """The dtype (peak) the matmuls run in: the weights' for float8 (W8A8), float4 for
        nvfp4 (W4A4), else the activations' (weight-only quantisation dequantises in the
        kernel)."""
        if self.dtype == "nvfp4":
            return FLOAT4_PEAK
        return self.dtype if self.dtype in WEIGHT_AND_ACTIVATION else activations

    def bytes(self, params: int, row: int) -> int:
        """Bytes of `params` weights whose rows are `row` inputs long (d_model for most):
        the values packed, and the scales (and int4 zero points) of their groups."""
        values = packed_bytes(params, self.dtype)
        if not self.quantized:
            return values
        group = self.group or self.default_group(row)
        if group > row:
            reason = f"exceeds the {row} inputs of a weight row (a scale group lies within one row)"
            raise FieldError("weights_group", group, reason)
        groups = ceil_div(params, row) * ceil_div(row, group)  # a row's last group may be short
        if self.dtype in BLOCKS:
            return values + groups * BLOCK_SCALE_BITS // 8
        per_group = 2 if self.dtype == "int4" else 1  # int4: a scale and a zero point
        return values + groups * per_group * SCALE_BITS // 8

    def default_group(self, row: int) -> int:
        """The scale group when none is given: a block format's block or int4's 128 (at
        most a row), else a whole row (one scale per output channel)."""
        if self.dtype in BLOCKS:
            return min(BLOCKS[self.dtype], row)
        return min(DEFAULT_INT4_GROUP, row) if self.dtype == "int4" else row

    def describe(self) -> str:
        if not self.quantized:
            return self.dtype
        head = QUANTIZED_HEAD if self.quantized_head else ""
        head += KEPT_ATTENTION if self.kept_attention else ""
        head += ON_TENSOR_CORES if self.tensor_core_kernel else ""
        if self.dtype == "int4":
            return f"int4 in groups of {self.group or DEFAULT_INT4_GROUP}{head}"
        if self.dtype in BLOCKS:
            return f"{self.dtype} in blocks of {BLOCKS[self.dtype]}{head}"
        scales = f"in groups of {self.group}" if self.group else "per channel"
        return f"{self.dtype} {scales}{head}"


def vocab_key(weights: WeightFormat) -> str | None:
    """A record's `vocab`: "replicated" where each rank holds the whole vocabulary, None
    where it is split (the default, as in records made before the field)."""
    return "replicated" if weights.replicated_vocab else None


def weight_format(weights: str | WeightFormat) -> WeightFormat:
    """A WeightFormat from a dtype name, or itself."""
    return weights if isinstance(weights, WeightFormat) else WeightFormat(weights)
