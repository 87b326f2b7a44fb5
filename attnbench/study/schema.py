"""The sweep schema: every field a study (a sweep file, or a command's flags) can set.

Each field is declared once, here: its type, the sections that use it, whether a list of
values is an axis of the grid, its default per section, its limits and its help. The
sweep files, the command-line flags generated from it, the typed points and the docs
all read it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import show_value
from ..model.capacity import DEFAULT_SCALE_DTYPE, MAX_SEQUENCES, SCALE_GROUP_WORDS
from ..model.devices import DEVICES, THIS_DEVICE
from ..model.dtypes import KV_DTYPES, MODEL_DTYPES, SCALE_DTYPES, canonical_dtype
from ..model.limits import (
    MAX_GEN_LEN,
    MAX_GPUS,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_REPEATS,
    MAX_TIME_LIMIT_S,
    MAX_TOKENS,
    MAX_WIDTH,
)
from ..model.weights import VOCAB_LAYOUTS, WEIGHT_DTYPES, WEIGHT_ONLY_KERNELS
from ..model.what_if import KV_HEAD_WORDS
from ..modules.provider_names import PROVIDER_ALIASES
from ..modules.provider_names import PROVIDER_NAMES as PROVIDERS

#: Sections a sweep file may hold besides defaults, sweep and models; `run` runs these.
SECTIONS = ("params", "kvmem", "decode", "fit", "predict")
#: Sections `run` runs when the file names none.
DEFAULT_SECTIONS = ("params", "kvmem", "decode")
FILE_KEYS = ("defaults", "sweep", "models", *SECTIONS)

SHAPE_FIELDS = ("d_model", "num_heads", "num_kv_heads", "head_dim")
_SHAPE = ("params", "kvmem", "decode", "predict")
_CACHE = ("kvmem", "fit")
#: The default of batch and tp, one per section that has one.
_ONE = {"kvmem": 1, "decode": 1, "predict": 1}

#: The devices a study or a command runs on, as the `device` field and the device flags take
#: them, and the one chosen when none is named.
DEVICE_CHOICES = "auto, cpu, cuda or cuda:i"
DEFAULT_DEVICE = "auto"
#: CPU threads a decode may use, per CPU of this machine.
THREADS_PER_CPU = 4
#: The defaults of decode's sampling: untimed calls before each measurement, the fewest
#: timed calls of adaptive sampling, the width it stops at, and the seconds of sampling
#: per measurement by device type (`max_time`, unless set).
DEFAULT_WARMUP = 2
DEFAULT_MIN_REPEATS = 5
DEFAULT_TARGET_REL_CI = 0.02
DEFAULT_MAX_TIME_S = {"cpu": 2.0, "cuda": 1.0}


def max_threads() -> int:
    """The most intra-op threads a decode may ask for: THREADS_PER_CPU per CPU here."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


@dataclass(frozen=True)
class Field:
    """One field. `default` is one value for every section or a {section: value} map."""

    type: type
    sections: tuple[str, ...]
    help: str
    axis: bool = True
    choices: tuple[str, ...] | None = None
    #: The choices as an unknown value's error lists them, where not every section takes
    #: every one (gpu: 'this' in predict alone); None: `choices`, joined.
    choices_text: str | None = None
    #: The smallest value of an integer; a float must be above 0.
    minimum: int | None = 1
    #: The largest value (numbers), or a function giving it on this machine.
    maximum: float | Callable[[], int] | None = None
    default: Any = None
    #: Names an integer field also takes, resolved where the value is used (num_kv_heads:
    #: mha and mqa, by the query heads of each shape).
    words: tuple[str, ...] = ()
    #: The help of the field's flag, where it differs from `help` (which describes the
    #: field in a sweep file, for every section): one text for every command, or one per
    #: section ({"fit": ...}); a section it does not name takes `help`. '{gpus}' names
    #: another option: the command line renders it as its flag (help_text's `name_of`).
    flag_help: str | Mapping[str, str] | None = None

    @property
    def upper(self) -> float | None:
        """The largest value allowed here, or None."""
        return self.maximum() if callable(self.maximum) else self.maximum

    def flag_text(self, section: str | None = None, name_of: Callable[[str], str] = str) -> str:
        """What the field's flag does in `section`'s command: its flag help for that
        section, else its help; the options it names ('{gpus}') by `name_of`."""
        if isinstance(self.flag_help, Mapping):
            text = self.flag_help.get(section or "", self.help)
        else:
            text = self.flag_help or self.help
        return re.sub(r"\{(\w+)\}", lambda m: name_of(m.group(1)), text)

    def help_text(self, section: str | None = None, name_of: Callable[[str], str] = str) -> str:
        """The flag's help in `section`'s command (flag_text), with its default where the
        help gives none and the largest value when there is one: 'Tokens (at most
        1,000).', 'Heads (default 1; at most 10).'; for the threads, what bounds it: '(at
        most 8 here: 4 per CPU)'."""
        text = self.flag_text(section, name_of)
        default = self.default_for(section) if section else None
        if isinstance(default, bool):
            text = with_default(text, "on" if default else "off")
        elif default is not None:
            text = with_default(text, default)
        if self.upper is None:
            return text
        upper = f"{self.upper:g}" if isinstance(self.upper, float) else f"{self.upper:,}"
        if self.maximum is max_threads:
            upper = f"{upper} here: {THREADS_PER_CPU} per CPU"
        text = text.rstrip(".")
        if text.endswith(")") and text[text.rfind("(") :].startswith("(default"):
            return f"{text[:-1]}; at most {upper})."
        return f"{text} (at most {upper})."

    def default_for(self, section: str) -> Any:
        if isinstance(self.default, Mapping):
            return self.default.get(section)
        return self.default


FIELDS: dict[str, Field] = {
    "d_model": Field(int, _SHAPE, "Model width, e.g. 4096.", maximum=MAX_WIDTH),
    "num_heads": Field(int, _SHAPE, "Query heads, e.g. 32.", maximum=MAX_HEADS),
    "num_kv_heads": Field(
        int,
        (*_SHAPE, "fit"),
        "KV heads, comma-separated, or mha and mqa: 32,8,4,1 or mha,8,mqa (default: one "
        "per query head). With models and no layer shape, or given as a flag: each model "
        "rebuilt with each count, beside its own.",
        maximum=MAX_HEADS,
        words=tuple(KV_HEAD_WORDS),
        flag_help="KV heads, comma-separated, or mha and mqa: 32,8,4,1 or mha,8,mqa "
        "(default: one per query head). With {model}: the model rebuilt with each count, "
        "beside its own.",
    ),
    "head_dim": Field(
        int,
        _SHAPE,
        "Head dimension (default d_model / heads).",
        maximum=MAX_HEADS,
        flag_help="Head dimension (default: {d_model} / {num_heads}).",
    ),
    "bias": Field(bool, ("params", "decode"), "Projections with bias.", default=False),
    "num_layers": Field(
        int,
        ("kvmem",),
        "Layers (default: the model's, else 1).",
        maximum=MAX_LAYERS,
        default=1,
    ),
    "batch": Field(
        int,
        ("kvmem", "decode", "fit", "predict"),
        "Batch sizes, comma-separated (fit: the longest context at this batch).",
        maximum=MAX_TOKENS,
        default=_ONE,
        flag_help={
            **{s: f"Batch sizes, comma-separated (default {n})." for s, n in _ONE.items()},
            "fit": "Batch sizes, comma-separated: the longest context that fits at each.",
        },
    ),
    "seq_len": Field(
        int,
        (*_CACHE, "predict"),
        "Cached tokens, comma-separated (fit: the largest batch at this context).",
        maximum=MAX_TOKENS,
        default={"kvmem": 2048, "predict": 2048},
        flag_help={
            "kvmem": "Cached tokens, comma-separated (default 2048).",
            "fit": "Contexts, comma-separated: the largest batch that fits at each.",
            "predict": "Contexts, comma-separated: a prefill of S tokens (time to first "
            "token) and a decode step with S cached (time per output token); default 2048.",
        },
    ),
    "output_len": Field(
        int,
        ("predict",),
        "Tokens each request generates after its prompt of seq_len tokens, comma-separated: "
        "the whole generation (the prefill, then a decode step per further token, each "
        "at the mean context, seq_len + output_len / 2) and, with batch requests kept in "
        "flight, the time between a request's tokens (default: the step at seq_len "
        "alone). Needs a model.",
        maximum=MAX_TOKENS,
    ),
    "dtype": Field(
        str,
        ("kvmem", "decode", "predict"),
        "float32, float16 or bfloat16 (default: the model's, else "
        "float16 for kvmem, float32 for decode and bfloat16 for predict).",
        choices=MODEL_DTYPES,
        default={"kvmem": "float16", "decode": "float32", "predict": "bfloat16"},
        flag_help={
            "predict": "float32, float16 or bfloat16 (default: the model's, as a serving "
            "engine loads it on a named GPU: a float32 checkpoint in bfloat16; else "
            "bfloat16).",
            "kvmem": "float32, float16 or bfloat16 (default: the model's, else float16).",
            "decode": "float32, float16 or bfloat16 (default: the model's, else float32).",
        },
    ),
    "prompt_len": Field(
        int,
        ("decode",),
        "Contexts S, comma-separated: a step writes position S and attends S + 1 keys.",
        maximum=MAX_TOKENS,
        default=128,
    ),
    "gen_len": Field(
        int,
        ("decode",),
        "Also time whole generations of N tokens from the context (default 0: off).",
        minimum=0,
        maximum=MAX_GEN_LEN,
        default=0,
    ),
    "provider": Field(
        str,
        ("decode",),
        f"Implementations, comma-separated: {', '.join(PROVIDERS)} (default attnbench).",
        choices=tuple(PROVIDERS),
        default="attnbench",
    ),
    "mode": Field(
        str,
        ("decode",),
        "cache, no_cache, or both (default).",
        choices=("cache", "no_cache"),
        default=["cache", "no_cache"],
        flag_help="cache, no_cache, or both: cache,no_cache (default).",
    ),
    "no_cache_max_prompt_len": Field(
        int,
        ("decode",),
        "Run no_cache only at contexts up to N (default: every context): its cost grows "
        "with the square of the context.",
        axis=False,
        maximum=MAX_TOKENS,
    ),
    "kv_dtype": Field(
        str,
        (*_CACHE, "predict"),
        f"Cache dtypes: {', '.join(KV_DTYPES)} (default: dtype, or the model's).",
        choices=KV_DTYPES,
        flag_help={
            "kvmem": f"Cache dtypes: {', '.join(KV_DTYPES)} (default: {{dtype}}, or the model's).",
            "fit": f"Cache dtypes: {', '.join(KV_DTYPES)} (default: the model's, a float32 "
            "checkpoint's bfloat16, as serving engines load it).",
        },
    ),
    "kv_scale_group": Field(
        int,
        _CACHE,
        "Scales of quantised caches: elements per scale, vector (one per token per head) "
        "or tensor (one per layer's K and V, none in the cache) (default: tensor for "
        "float8, as vLLM, SGLang and TensorRT-LLM store it; vector for int8 and int4).",
        maximum=MAX_TOKENS,
        words=SCALE_GROUP_WORDS,
    ),
    "scale_dtype": Field(
        str,
        _CACHE,
        "Scales' dtype.",
        choices=SCALE_DTYPES,
        default=DEFAULT_SCALE_DTYPE,
    ),
    "sliding_window": Field(
        int,
        _CACHE,
        "Window of the windowed layers; 0 or none: no window (default: the model's).",
        minimum=0,
        maximum=MAX_TOKENS,
    ),
    "layer_pattern": Field(
        str,
        _CACHE,
        "The layers' layout, repeated over them: L a sliding or chunked layer (it keeps at "
        "most sliding_window tokens), G a global one; LLLG: three of each four bounded "
        "(default: the model's).",
        flag_help="The layers' layout, repeated over them: L a sliding or chunked layer (it "
        "keeps at most {sliding_window} tokens), G a global one; LLLG: three of each four "
        "bounded (default: the model's).",
    ),
    "page_size": Field(int, _CACHE, "Paged blocks of P tokens.", maximum=MAX_TOKENS),
    "tp": Field(
        int,
        (*_CACHE, "decode", "predict"),
        "Tensor-parallel ranks, comma-separated (fit: default gpus; decode-speed: one "
        "value, as many as torchrun's ranks).",
        maximum=MAX_GPUS,
        default=_ONE,
        flag_help={
            "kvmem": "Tensor-parallel ranks, comma-separated: the cache per GPU "
            f"(default {_ONE['kvmem']}).",
            "decode": "Tensor-parallel ranks: one value, as many as torchrun starts "
            f"(default {_ONE['decode']}).",
            "fit": "Tensor-parallel ranks, comma-separated, timed by {tpot} and {ttft} "
            "within one node's 8 GPUs (default: {gpus}).",
            "predict": "Tensor-parallel ranks, comma-separated: the step of one rank, with "
            "its all-reduces over the GPU's interconnect, within one node's 8 GPUs "
            "(default 1).",
        },
    ),
    "ep": Field(
        int,
        ("predict", "fit"),
        "Expert-parallel ranks, comma-separated: a mixture of experts' routed experts split "
        "whole over ep of the tp ranks (SGLang's ep_size, vLLM's enable_expert_parallel at "
        "tp ranks), the step timed on the rank the router sends the most (default 1: "
        "each expert split over all tp).",
        maximum=MAX_GPUS,
        default=1,
        flag_help="Expert-parallel ranks, comma-separated: a mixture of experts' routed "
        "experts split whole over ep of the {tp} ranks (SGLang's ep_size; vLLM's "
        "enable_expert_parallel, at {tp} ranks), a step timed on the rank the router "
        "sends the most (default 1: each expert split over all {tp} ranks).",
    ),
    "dp_attention": Field(
        bool,
        ("predict", "fit"),
        "Data-parallel attention: each of the tp ranks runs the attention of its own "
        "share of the batch's sequences with the whole attention's weights and caches "
        "them whole, the MLPs and experts every rank's tokens, gathered before them and "
        "scattered back (SGLang's enable_dp_attention, vLLM's data parallelism beside "
        "expert parallelism, TensorRT-LLM's enable_attention_dp) (default: the attention "
        "split over the tp ranks).",
        default=False,
        flag_help="Data-parallel attention: each of the {tp} ranks runs the attention of its "
        "own share of the batch's sequences with the whole attention's weights and "
        "caches them whole, the MLPs and experts every rank's tokens, gathered before "
        "them and scattered back (SGLang's enable_dp_attention, vLLM's data parallelism "
        "beside expert parallelism, TensorRT-LLM's enable_attention_dp) (default: the "
        "attention split over the {tp} ranks).",
    ),
    # one batch's sequence lengths: a list that replaces batch and seq_len (not an axis)
    "seq_lens": Field(
        int,
        ("kvmem",),
        f"One batch's lengths, up to {MAX_SEQUENCES:,} sequences: 100,50,200 or 8x512 or "
        "linspace:1:4096:64.",
        maximum=MAX_TOKENS,
    ),
    # capacity planning (fit)
    "memory": Field(str, ("fit",), "Memory of each GPU: 80GiB, 80GB (= 80e9 bytes), 1.5TiB."),
    "gpus": Field(
        int,
        ("fit",),
        "GPUs in all (default: tp, else 1).",
        maximum=MAX_GPUS,
        flag_help="GPUs in all (default: {tp}, else 1).",
    ),
    "weights_dtype": Field(
        str,
        ("fit", "predict"),
        "Weights' dtype (default: as serving engines load the checkpoint on a GPU, in the "
        "format its quantization_config gives, else in the model's dtype, a float32 "
        "checkpoint's in bfloat16): int8, int4 and mxfp4 are weight-only (the matmuls run "
        "in dtype), float8_e4m3fn and float8_e5m2 quantise the activations too "
        "(the matmuls run at the GPU's float8 peak), nvfp4 as well (at its float4 peak: "
        "Blackwell's).",
        choices=WEIGHT_DTYPES,
    ),
    "weights_group": Field(
        int,
        ("fit", "predict"),
        "Quantised weights (int8, int4, float8): input elements per scale (default: 128 "
        "for int4, one scale per output channel for int8 and float8); mxfp4 and nvfp4 "
        "scale the blocks their formats fix (32 and 16 inputs), and 16- and 32-bit weights "
        "of the same sweep have none.",
        maximum=MAX_TOKENS,
    ),
    "quantize_head": Field(
        bool,
        ("fit", "predict"),
        "Quantised weights: the output head quantised with them, as gpt-fast's and "
        "torchao's quantisers do (default: kept in the model's dtype, as GPTQ, AWQ and "
        "float8 checkpoints keep it; a head tied to the embeddings stays so).",
        default=False,
    ),
    "keep_attention": Field(
        bool,
        ("fit", "predict"),
        "Quantised weights: the attention's projections kept in the model's dtype, their "
        "matmuls at its rate, as the 4-bit checkpoints of mixtures of experts keep them "
        "(gpt-oss's MXFP4, NVIDIA's DeepSeek-R1-FP4) (default: quantised with the rest).",
        default=False,
    ),
    "weight_only_kernel": Field(
        str,
        ("fit", "predict"),
        "Weight-only weights (int8, int4, mxfp4): where their kernel multiplies at small "
        "batches: cuda-cores, untiled, as a GEMV that dequantises as it reads (gpt-fast, "
        "MLC, TensorRT-LLM's weight-only GEMV), or tensor-cores, in tiles of 16 tokens, as "
        "Marlin does (vLLM's and SGLang's GPTQ and AWQ kernels).",
        choices=WEIGHT_ONLY_KERNELS,
        default="cuda-cores",
    ),
    "vocab_layout": Field(
        str,
        ("fit", "predict"),
        "How tensor-parallel ranks hold the vocabulary (the embeddings and the output "
        "head): split over them, each rank's logits then gathered (vLLM, TensorRT-LLM), "
        "or replicated, each rank holding it whole and computing every logit (gpt-fast).",
        choices=VOCAB_LAYOUTS,
        default="split",
    ),
    "reserve": Field(
        str,
        ("fit",),
        "Per GPU, for activations and runtime: 10% or 4GiB.",
        default="10%",
    ),
    # the device a prediction is for, and its performance model (predict, fit)
    "gpu": Field(
        str,
        ("predict", "fit"),
        f"A named GPU ({', '.join(DEVICES)}), comma-separated, or {THIS_DEVICE}: the "
        "peaks this machine measures (predict).",
        choices=(*DEVICES, THIS_DEVICE),
        choices_text=f"{', '.join(DEVICES)}; or, in predict, {THIS_DEVICE} (this machine's "
        "measured peaks)",
        default={"predict": THIS_DEVICE},
        flag_help={
            "predict": f"Named GPUs, comma-separated: {', '.join(DEVICES)}; or "
            f"{THIS_DEVICE}, the peaks this machine measures (default {THIS_DEVICE}).",
            "fit": f"A named GPU ({', '.join(DEVICES)}): its memory (unless {{memory}}) "
            "and the peaks that time {tpot} and {ttft}.",
        },
    ),
    "calibration": Field(
        str,
        ("predict", "fit"),
        "A calibration file: the performance model's efficiencies and overhead, fitted "
        "on a measured run (default: the stated defaults).",
        axis=False,
        flag_help={
            "predict": "A calibration file that {calibrate} wrote (default: the stated defaults).",
            "fit": "A calibration file of the performance model, fitted against {gpu} "
            "(default: the stated defaults).",
        },
    ),
    "tpot": Field(
        str,
        ("fit",),
        "The most time per output token, with its unit: 50ms, 0.05s (needs gpu).",
        axis=False,
        flag_help="The most time per output token, with its unit: 50ms, 0.05s (needs {gpu}).",
    ),
    "ttft": Field(
        str,
        ("fit",),
        "The most time to first token, the prefill of one sequence of seq_len tokens: "
        "2s, 500ms (needs gpu).",
        axis=False,
        flag_help="The most time to first token, the prefill of one sequence of "
        "{seq_len} tokens: 2s, 500ms (needs {gpu}).",
    ),
    # scalar options
    "device": Field(
        str,
        ("kvmem", "decode"),
        f"{DEVICE_CHOICES} (default {DEFAULT_DEVICE}).",
        axis=False,
        default=DEFAULT_DEVICE,
    ),
    "measure": Field(
        bool,
        ("kvmem",),
        "Allocate the real cache and count it (default on).",
        axis=False,
        default=True,
    ),
    "prefill": Field(
        bool,
        ("decode",),
        "Prefill the prompt (timed), or fill the cache with random K/V instead.",
        axis=False,
        default=True,
    ),
    "prefill_memory": Field(
        bool,
        ("decode",),
        "Also count the peak bytes one prefill call allocates (the CPU's profiler, the "
        "CUDA allocator), beside the bytes of its whole score matrix.",
        axis=False,
        default=False,
    ),
    "batch_spec": Field(
        str,
        ("decode",),
        "Batches sequence by sequence, vLLM's way: 8q1s1k (8 decodes over 1k keys), "
        "q4s1k (4 speculative tokens), q512s2k_16q1s1k (a prefill chunk and 16 decodes), "
        "8q1s128..4k (contexts drawn, seeded); replaces batch and prompt_len.",
        flag_help="Batches sequence by sequence, vLLM's way: 8q1s1k (8 decodes over 1k "
        "keys), q4s1k (4 speculative tokens), q512s2k_16q1s1k (a prefill chunk and 16 "
        "decodes), 8q1s128..4k (contexts drawn, seeded); replaces {batch} and {prompt_len}.",
    ),
    "block_size": Field(
        int,
        ("decode",),
        "KV cache blocks of P tokens (a paged cache), or contiguous; both: "
        "contiguous,16,64,256 (default contiguous).",
        maximum=MAX_TOKENS,
        default="contiguous",
        words=("contiguous",),
    ),
    "warmup": Field(
        int,
        ("decode",),
        f"Untimed calls before each measurement (default {DEFAULT_WARMUP}).",
        axis=False,
        minimum=0,
        maximum=MAX_REPEATS,
        default=DEFAULT_WARMUP,
    ),
    "repeats": Field(
        int,
        ("decode",),
        "Timed calls per measurement (default: adaptive, see target_rel_ci).",
        axis=False,
        maximum=MAX_REPEATS,
        flag_help="Timed calls per measurement (default: adaptive, see {target_rel_ci}).",
    ),
    "min_repeats": Field(
        int,
        ("decode",),
        f"Adaptive sampling: timed calls at the least, max_time or not (default "
        f"{DEFAULT_MIN_REPEATS}).",
        axis=False,
        maximum=MAX_REPEATS,
        default=DEFAULT_MIN_REPEATS,
        flag_help=f"Adaptive sampling: timed calls at the least, {{max_time}} or not (default "
        f"{DEFAULT_MIN_REPEATS}).",
    ),
    "max_time": Field(
        float,
        ("decode",),
        "Adaptive sampling: seconds per measurement at the most (default "
        f"{DEFAULT_MAX_TIME_S['cpu']:g} on the CPU, {DEFAULT_MAX_TIME_S['cuda']:g} on CUDA).",
        axis=False,
        maximum=MAX_TIME_LIMIT_S,
    ),
    "target_rel_ci": Field(
        float,
        ("decode",),
        "Adaptive sampling: stop once the 95% interval of the median is within this "
        f"fraction of it (default {DEFAULT_TARGET_REL_CI:g}).",
        axis=False,
        maximum=1.0,
        default=DEFAULT_TARGET_REL_CI,
    ),
    "baseline_provider": Field(
        str,
        ("decode",),
        "The provider every speedup_vs_baseline is taken against (default attnbench).",
        axis=False,
        choices=tuple(PROVIDERS),
        default="attnbench",
        flag_help="The provider the others' speed-ups are taken against (default attnbench).",
    ),
    "reference": Field(
        str,
        ("decode",),
        "What each step is also timed against, sample by sample, for its in-run ratio "
        "x_of_reference: kernels (its kernels each alone), a provider, or none "
        "(default kernels).",
        axis=False,
        choices=("kernels", "none", *PROVIDERS),
        default="kernels",
    ),
    "instructions": Field(
        bool,
        ("decode",),
        "Also count the CPU instructions of each cached step with callgrind (valgrind), "
        "all points in one valgrind process: a metric the machine's load does not move.",
        axis=False,
        default=False,
    ),
    "threads": Field(
        int,
        ("decode",),
        f"CPU threads for torch.set_num_threads, {THREADS_PER_CPU} per CPU.",
        axis=False,
        maximum=max_threads,
        flag_help="CPU threads of each step, for torch.set_num_threads (default: torch's).",
    ),
    "cuda_graph": Field(
        bool,
        ("decode",),
        "Replay the step from a CUDA graph captured once per point; both: [false, true].",
        default=False,
        flag_help="Replay each step from a CUDA graph captured once per point (default off).",
    ),
    "flush_l2": Field(
        bool,
        ("decode",),
        "Flush the GPU L2 cache before each step.",
        axis=False,
        default=False,
    ),
    "cold_cache": Field(
        bool,
        ("decode",),
        "On the CPU, time the points sampled in turn over copies of their weights and "
        "caches, each call on the next, so that a step reads them from memory as a whole "
        "model's layers do, not from the CPU's last-level cache (where that cache's size "
        "is known and memory holds the copies; each record says how many: `copies`).",
        axis=False,
        default=True,
    ),
}


#: How a number is written, as a flag's value and in a sweep file alike: decimal ASCII
#: digits with a sign, and for a float a fraction and an exponent too (8, -1, 0.02, 2e-2,
#: +1E+3, .5). Not octal, hexadecimal, sexagesimal or digit separators, nor the digits of
#: other scripts.
INT_TEXT = r"[-+]?[0-9]+"
FLOAT_TEXT = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
#: Numbers given as a word, {field: {word: value}}: what a sweep file and a flag both take.
NUMBER_WORDS = {"sliding_window": {"none": 0}}


def parse_number(text: str, kind: type) -> int | float | None:
    """`text` as a value of an int or float field, written as INT_TEXT or FLOAT_TEXT
    say; None when it is not one (or an integer of more digits than Python converts)."""
    text = text.strip()
    if not re.fullmatch(INT_TEXT if kind is int else FLOAT_TEXT, text):
        return None
    try:
        return kind(text)
    except ValueError:
        return None


#: Earlier names of fields, accepted in sweep files and as flags: {old: new}.
ALIASES = {"backend": "provider"}
#: Earlier values of fields: {field: {old: new}}.
VALUE_ALIASES = {
    "provider": PROVIDER_ALIASES,
    "baseline_provider": PROVIDER_ALIASES,
    "reference": PROVIDER_ALIASES,
}


def canonical_value(name: str, value: Any) -> Any:
    """`value` of field `name` under its current name (sdpa -> attnbench; MQA -> mqa;
    sliding_window none -> 0; H100-SXM -> h100-sxm; bf16 -> bfloat16)."""
    if not isinstance(value, str):
        return value
    word = value.strip().lower()
    if word in NUMBER_WORDS.get(name, {}):
        return NUMBER_WORDS[name][word]
    spec = FIELDS.get(name)
    if spec is not None and word in spec.words:
        return word
    value = VALUE_ALIASES.get(name, {}).get(value, value)
    if spec is None or not spec.choices or value in spec.choices:
        return value
    if (dtype := canonical_dtype(word)) in spec.choices:
        return dtype
    return next((c for c in spec.choices if c.lower() == word), value)


def spelled_twice(written: Sequence[Any], meant: Sequence[Any]) -> str | None:
    """Why two of the values `written` are one value spelled two ways, as `meant` (each
    one's canonical value, in order) shows ('none and 0 are one value, given twice':
    sliding_window's none is 0), or None: a check for repeats sees the values made
    canonical, and would name them so, not as the user wrote them."""
    seen: dict = {}
    for value, canonical in zip(written, meant, strict=True):
        earlier = seen.setdefault(canonical, value)
        if earlier != value:
            return f"{show_value(earlier)} and {show_value(value)} are one value, given twice"
    return None


def with_default(help: str, default: Any) -> str:
    """`help` with '(default X).' where it states no default of its own: how every flag
    states its default, a field's (Field.help_text) and any other (cli.group)."""
    if "default" in help.lower():
        return help
    return f"{help.rstrip('.')} (default {default})."


def fields_for(section: str) -> list[str]:
    """The fields a section uses, in schema order."""
    return [n for n, f in FIELDS.items() if section in f.sections]


def above_maximum(name: str, value: Any) -> str | None:
    """Why integer `value` is too large for field `name`, or None when it is not."""
    spec = FIELDS[name]
    limit = spec.upper
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if limit is None or not number or value <= limit:
        return None
    if spec.maximum is max_threads:
        return f"must be <= {limit} ({THREADS_PER_CPU} per CPU, {limit // THREADS_PER_CPU} CPUs)"
    return f"must be <= {limit}"
