"""Reference tables of the documentation, printed as Markdown from the code itself:

    python scripts/docs_tables.py schema          # every field of a sweep file
    python scripts/docs_tables.py fields kvmem    # every field of a command's records
    python scripts/docs_tables.py models          # the model presets and their sources

scripts/docs_examples.py runs these for the pages that show them, and CI checks that the
pages hold their current output: a field added to the schema or to a record type changes
the page. A record field that has no description below is an error (exit 1), so a new
field is documented before CI passes.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Sequence
from typing import Any

from attnbench.experiments.decode import DecodeRecord
from attnbench.experiments.fit import FitRecord
from attnbench.experiments.kvmem import KvmemRecord
from attnbench.experiments.params import ParamsRecord
from attnbench.experiments.predict import PredictRecord
from attnbench.experiments.whole_model import ModelPartRecord
from attnbench.model.devices import DEVICES, flops_for
from attnbench.model.presets import PRESETS
from attnbench.render import columns
from attnbench.study import schema
from attnbench.study.sections import KINDS

BYTES = "bytes"
# Kept as a table: one field a line, (unit, meaning), as the docs show it.
# fmt: off
#: (unit, meaning) of each record field; a command's own entries come first.
COMMON: dict[str, tuple[str, str]] = {
    "model": ("", "the model preset or config.json the row describes; empty for a shape "
                  "given by d_model and heads"),
    "variant": ("", "MHA, GQA-g (g KV heads), MQA (one KV head) or MLA (a latent cache)"),
    "d_model": ("", "model width d"),
    "num_heads": ("", "query heads Hq"),
    "num_kv_heads": ("", "KV heads Hkv"),
    "head_dim": ("", "head dimension D"),
    "bias": ("", "q, k and v projections with bias"),
    "biases": ("", "which projections carry a bias, in words: `no bias`, `bias` (all four), "
                   "`q/k/v bias` (Qwen2's)"),
    "batch": ("sequences", "batch size B"),
    "dtype": ("", "the model's dtype: weights, activations, and the cache unless kv_dtype "
                  "says otherwise"),
    "num_layers": ("layers", "layers L"),
    "status": ("", "`ok`, or why the row holds no measurement (see below)"),
    "published_kv_heads": ("", "on every row of a what-if set (a model rebuilt with other "
                               "KV-head counts by `--kv-heads`), the model's own count: its "
                               "own row is the one with num_kv_heads equal; empty otherwise"),
    "layer_pattern": ("", "the layout given by `--layer-pattern` (L bounded, G global, "
                          "repeated over the layers); empty: the model's"),
}
def comparison(stem: str, what: str) -> dict[str, tuple[str, str]]:
    """The fields of one comparison of points sampled in turn (experiments.interleave)."""
    return {
        f"{stem}_median": ("ratio", f"{what}: median over rounds of the ratio within a round"),
        f"{stem}_p25": ("ratio", "its 25th percentile"),
        f"{stem}_p75": ("ratio", "its 75th percentile"),
        f"{stem}_samples": ("ratio", "its samples, one per round (JSON only)"),
        f"{stem}_ci_lo": ("ratio", "the bootstrap 95% interval of its median: low end"),
        f"{stem}_ci_hi": ("ratio", "high end"),
    }


FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "params": {
        "q_params": ("parameters", "q_proj: d·Hq·D, plus Hq·D with bias"),
        "k_params": ("parameters", "k_proj: d·Hkv·D, plus Hkv·D with bias"),
        "v_params": ("parameters", "v_proj: d·Hkv·D, plus Hkv·D with bias"),
        "o_params": ("parameters", "o_proj: Hq·D·d, plus d with bias"),
        "total_params": ("parameters", "their sum, from the formula"),
        "module_params": ("parameters", "counted on a GroupedQueryAttention built on the "
                                        "meta device; must equal total_params"),
        "ratio_vs_mha": ("fraction", "total_params over an MHA layer's of the same shape"),
    },
    "model_parts": {
        "part": ("", "embeddings, attention, mlp, experts, router, norms, output head; then "
                     "total, and active per token for a mixture of experts"),
        "params": ("parameters", "from the formulas (model/model_params.py)"),
        "meta_params": ("parameters", "counted on a meta-device skeleton of the model; must "
                                      "equal params"),
        "weight_bytes": (BYTES, "params in the weights' dtype"),
        "source": ("", "what counted it: attnbench's formulas, or transformers' build of "
                       "the model on the meta device (a model type without formulas)"),
    },
    "kvmem": {
        "seq_len": ("tokens", "context S: tokens cached per sequence (the longest of "
                              "`--seq-lens`)"),
        "bytes_per_token": (BYTES, "one token of one sequence, over all layers"),
        "kv_bytes_per_layer": (BYTES, "one layer (the largest) for the whole batch"),
        "kv_bytes": (BYTES, "the whole cache: every layer, every sequence, values and scales"),
        "measured_bytes": (BYTES, "storage of the cache allocated for real on the device; "
                                  "must equal kv_bytes"),
        "ratio_vs_mha": ("fraction", "kv_bytes over an MHA cache (as many KV heads as query "
                                     "heads)"),
        "kv_dtype": ("", "the cache's dtype"),
        "kv_scale_group": ("elements", "values per scale of a quantised cache, `vector` "
                                       "(one per token of a head) or `tensor` (none in the "
                                       "cache); empty: the dtype's default, `tensor` for "
                                       "float8, `vector` for int8 and int4"),
        "scale_dtype": ("", "the scales' dtype (quantised caches that store scales)"),
        "scale_bytes": (BYTES, "the scales' share of kv_bytes"),
        "sliding_window": ("tokens", "window of the windowed layers; empty: none"),
        "windowed_layers": ("layers", "layers with a window"),
        "page_size": ("tokens", "tokens per block of a paged cache"),
        "tp": ("ranks", "tensor-parallel ranks"),
        "kv_heads_per_gpu": ("", "KV heads one rank keeps (Hkv / tp, at least one); empty "
                                 "for MLA"),
        "kv_bytes_per_gpu": (BYTES, "one rank's cache"),
        "kv_bytes_all_gpus": (BYTES, "every rank's cache, replicated heads counted each time"),
        "used_bytes": (BYTES, "what the tokens of `--seq-lens` take, without padding"),
        "paged_bytes": (BYTES, "the same batch in whole blocks of page_size tokens"),
        "contiguous_bytes": (BYTES, "the same batch with every sequence at the longest length"),
        "paged_waste_pct": ("%", "100 · (paged - used) / paged"),
        "contiguous_waste_pct": ("%", "100 · (contiguous - used) / contiguous"),
        "measured_paged_bytes": (BYTES, "storage of the paged block pool allocated for real"),
        "kv_layers": ("layers", "the layers that cache K and V (a hybrid's attention layers)"),
        "state_layers": ("layers", "the layers that keep a fixed-size state (Mamba, linear "
                                   "attention, short convolutions)"),
        "state_bytes": (BYTES, "their states for the batch, whatever the context"),
        "total_bytes": (BYTES, "kv_bytes + state_bytes"),
        "layer_kinds": ("", "how many layers of each kind, as the model declares them"),
        "state_bytes_per_gpu": (BYTES, "one rank's share of state_bytes"),
        "max_positions": ("tokens", "the positions the model declares "
                                    "(max_position_embeddings); a longer seq_len is computed "
                                    "all the same; empty without a model"),
    },
    "decode": {
        "provider": ("", "the implementation timed (see Providers)"),
        "device": ("", "cpu, or cuda:i"),
        "prompt_len": ("tokens", "context S: a step writes position S and attends S + 1 keys"),
        "gen_len": ("tokens", "tokens of a timed whole generation; 0: none"),
        "mode": ("", "`cache` (one decode step over the cache) or `no_cache` (a causal "
                     "forward over S + 1 tokens)"),
        "cuda_graph": ("", "the step replays a CUDA graph"),
        "tp": ("ranks", "tensor-parallel ranks of a torchrun job"),
        "step_ms_median": ("ms", "median time of one step"),
        "step_ms_p25": ("ms", "25th percentile of the step's samples"),
        "step_ms_p75": ("ms", "75th percentile of the step's samples"),
        "samples_ms": ("ms", "every sample of the step, in the order taken (JSON only)"),
        "step_repeats": ("samples", "samples taken"),
        "step_calls_per_sample": ("calls", "consecutive calls one sample times (their mean)"),
        "step_stop": ("", "why sampling stopped: target_ci, max_time, max_repeats or repeats"),
        "step_ci_pct": ("%", "half-width of the 95% interval of the median, over the median"),
        "tokens_per_s": ("tokens/s", "batch / step_ms_median"),
        "speedup_vs_no_cache": ("ratio", "cache rows: 1 / x_of_no_cache_median"),
        "baseline_provider": ("", "the provider x_of_baseline is taken against"),
        "speedup_vs_baseline": ("ratio", "1 / x_of_baseline_median; 1 on the baseline's rows"),
        "bytes_per_step": (BYTES, "the least a step moves: weights, K/V read and written, "
                                  "activations"),
        "achieved_gbps": ("GB/s", "bytes_per_step / step time (10^9 bytes per second)"),
        "peak_gbps": ("GB/s", "copy bandwidth measured before the timed points of the same "
                              "run"),
        "pct_of_peak_bw": ("%", "100 · achieved_gbps / peak_gbps"),
        "flops_per_step": ("FLOPs", "the step's projections and attention"),
        "kv_bytes_per_gpu": (BYTES, "cache rows: the layer's cache on one rank"),
        "allreduce_ms_median": ("ms", "tensor parallel: the all-reduce of the output, "
                                      "timed alone"),
        "allreduce_ms_p25": ("ms", "its 25th percentile"),
        "allreduce_ms_p75": ("ms", "its 75th percentile"),
        "allreduce_samples_ms": ("ms", "its samples (JSON only)"),
        "prefill_ms_median": ("ms", "median time of the prefill: one causal forward over S "
                                    "tokens"),
        "prefill_ms_p25": ("ms", "its 25th percentile"),
        "prefill_ms_p75": ("ms", "its 75th percentile"),
        "prefill_samples_ms": ("ms", "its samples (JSON only)"),
        "prefill_flops": ("FLOPs", "the prefill's projections and causal attention"),
        "achieved_tflops": ("TFLOPS", "prefill_flops / prefill time (10^12 per second)"),
        "peak_tflops": ("TFLOPS", "a square matmul in the point's dtype, measured in the "
                                  "same run"),
        "pct_of_peak_flops": ("%", "100 · achieved_tflops / peak_tflops"),
        "gen_ms_median": ("ms", "median time of a whole generation of gen_len tokens"),
        "gen_ms_p25": ("ms", "its 25th percentile"),
        "gen_ms_p75": ("ms", "its 75th percentile"),
        "gen_samples_ms": ("ms", "its samples, one per generation (JSON only)"),
        "gen_tokens_per_s": ("tokens/s", "batch · gen_len / gen_ms_median"),
        "reference": ("", "what the step was timed against in the same rounds: `kernels` "
                          "or a provider"),
        "x_of_reference_median": ("ratio", "median over rounds of the step's sample over "
                                           "its reference's sample(s) of the same round"),
        "x_of_reference_p25": ("ratio", "its 25th percentile"),
        "x_of_reference_p75": ("ratio", "its 75th percentile"),
        "x_of_reference_samples": ("ratio", "its samples, one per round (JSON only)"),
        "sampling": ("", "`interleaved`: sampled in turn with the other points of its "
                         "context; `alone`"),
        "sampling_group": ("", "the number of the group it was sampled with, in the section"),
        "narrowest_variant": ("", "the variant x_of_narrowest is taken against (MQA)"),
        **comparison("x_of_narrowest", "cache rows: the step over the narrowest-KV "
                                       "variant's"),
        **comparison("x_of_no_cache", "cache rows: the step over the same variant's "
                                      "no_cache step"),
        **comparison("x_of_baseline", "the step over the baseline provider's, same mode"),
        "instructions_per_step": ("instructions", "CPU instructions of one step under "
                                                  "callgrind (`--instructions`)"),
        "instructions_counter": ("", "the valgrind that counted them (`valgrind-3.19.0`): "
                                     "counts by another are not compared"),
        "noisy": ("", "(step_ms_p75 - step_ms_p25) / step_ms_median > 10%, fewer than 11 "
                      "samples (too few to judge the spread), or cpu_share under 0.8"),
        "status": ("", "`ok`, or `noisy` with or without a reason (timed, see noisy), or "
                       "why the row holds no measurement (see below)"),
        "layouts": ("", "the memory layouts its samples span, each sampled for as many "
                        "rounds: a fresh allocation of the group's weights, inputs and "
                        "caches, or, over copies, a run of rounds over copies allocated "
                        "once"),
        "copies": ("", "the copies of its weights and cache its step rotates over, a call "
                       "on each in turn, so that it reads them from memory "
                       "(`--cold-cache`); 1: timed on one"),
        "cpu_share": ("", "the share of the CPU time its threads needed this process had "
                          "while sampling (on the CPU; with several threads, from Linux's "
                          "/proc/stat; empty otherwise): under 0.8, another process held "
                          "the CPU and the row is noisy"),
        "projection_path": ("", "how the projections ran on the CPU: `onednn-packed` or "
                                "`torch`"),
        "batch_spec": ("", "the batch sequence by sequence (`--batch-spec`, see "
                           "[Serving workloads](../serving.md)); empty: a uniform batch"),
        "block_size": ("tokens", "tokens per block of a paged cache (`--block-size`); "
                                 "empty: contiguous"),
        "kv_allocated_bytes": (BYTES, "a paged cache after the step: its whole blocks, as "
                                      "`kvmem --page-size` counts them"),
        "kv_used_bytes": (BYTES, "the tokens those blocks hold"),
        "kv_waste_pct": ("%", "the share of the blocks that holds no token"),
        **comparison("x_of_contiguous", "a paged step over the same point's step over the "
                                        "contiguous cache"),
        "prefill_peak_bytes": (BYTES, "the peak allocated during one prefill call "
                                      "(`--prefill-memory`)"),
        "prefill_peak_method": ("", "how it was counted: `cpu-profiler` (torch's profiler's "
                                    "allocation events) or `cuda-allocator`"),
        "score_matrix_bytes": (BYTES, "one whole score matrix, B·Hq·S·S elements of the "
                                      "dtype (`--prefill-memory`)"),
        "prefill_analytic_bytes": (BYTES, "what the prefill holds at its peak by the "
                                          "provider's declaration: q, K, V, the attention "
                                          "and layer outputs, and the bytes per score a "
                                          "provider that scores explicitly holds"),
    },
    "fit": {
        "question": ("", "`largest_batch` (at a context) or `longest_context` (at a batch)"),
        "given": ("", "the question's input: the context for largest_batch, the batch for "
                      "longest_context"),
        "memory_bytes_per_gpu": (BYTES, "memory of one GPU"),
        "gpus": ("GPUs", "GPUs in all"),
        "tp": ("ranks", "tensor-parallel ranks of one replica"),
        "ep": ("ranks", "ranks of the tp the routed experts are split whole over, a step "
                        "timed on the busiest; empty: each expert split over all tp"),
        "attention": ("", "`data-parallel` where each rank runs and caches its own "
                          "sequences' attention, the whole attention's weights on each; "
                          "empty: split over the tp ranks"),
        "replicas": ("", "gpus / tp"),
        "weights_dtype": ("", "the weights' dtype"),
        "weights": ("", "quantised weights, as `int4 in groups of 128, the head too`; empty: "
                    "16- or 32-bit weights"),
        "vocab": ("", "`replicated` where every rank holds the whole vocabulary; empty: split"),
        "kv_dtype": ("", "the cache's dtype"),
        "kv": ("", "a quantised cache's format, as `int8 in groups of 32, float32 scales`; "
               "empty: a 16- or 32-bit cache"),
        "page_size": ("tokens", "tokens per block of a paged cache"),
        "sliding_window": ("tokens", "window of the windowed layers"),
        "windowed_layers": ("layers", "layers with a window"),
        "seq_len": ("tokens", "the context: given, or the answer; empty when unbounded"),
        "batch": ("sequences", "sequences over all replicas: given, or the answer"),
        "batch_per_replica": ("sequences", "sequences on one replica"),
        "context_unbounded": ("", "every layer keeps at most its window, and full windows fit"),
        "max_position_embeddings": ("tokens", "the longest context the model was made for"),
        "kv_bytes_per_sequence_per_gpu": (BYTES, "one sequence's K/V cache on one GPU"),
        "state_bytes_per_sequence_per_gpu": (BYTES, "one sequence's state in a hybrid's state "
                                                    "layers on one GPU, whatever the context"),
        "state_bytes_per_gpu": (BYTES, "the answer's state on one GPU"),
        "weights_bytes_per_gpu": (BYTES, "the weights one GPU holds"),
        "kv_bytes_per_gpu": (BYTES, "the cache of the answer on one GPU"),
        "reserve_bytes_per_gpu": (BYTES, "`--reserve`"),
        "free_bytes_per_gpu": (BYTES, "what is left: memory - weights - cache - reserve; "
                                      "negative when weights and reserve exceed the memory"),
        "status": ("", "`ok`, or why nothing fits: then the answer (batch or seq_len) is 0"),
        "gpu": ("", "the named GPU (`--gpu`): its memory unless `--memory`, its peaks for "
                    "the targets; empty without one"),
        "tpot_target_ms": ("ms", "`--tpot`"),
        "ttft_target_ms": ("ms", "`--ttft`"),
        "memory_batch": ("sequences", "the largest batch memory alone allows: today's "
                                      "answer without targets; `batch` is at most this"),
        "tpot_ms": ("ms", "predicted decode step of batch_per_replica sequences on one "
                          "rank, all-reduces included; one sequence's when no batch meets "
                          "the targets"),
        "ttft_ms": ("ms", "predicted prefill of one sequence of seq_len tokens (with "
                          "`--ttft`)"),
        "tokens_per_s_per_gpu": ("tokens/s", "batch_per_replica / tpot / tp"),
        "bound": ("", "`memory` or `latency`: the limit that sets the batch"),
        "perf_model": ("", "the roofline's parameters and where they came from (defaults, "
                           "or a calibration)"),
    },
    "predict": {
        "gpu": ("", "a named GPU, or `this`: the peaks this machine measured"),
        "seq_len": ("tokens", "the context S: a prefill of S tokens, a decode step with S "
                              "cached (it attends S + 1 keys)"),
        "kv_dtype": ("", "the cache's dtype"),
        "tp": ("ranks", "tensor-parallel ranks: the counts and times are one rank's"),
        "layer_prefill_ms": ("ms", "one attention layer's prefill of the batch's prompts (a "
                                   "model's own layer: an MLA model's, one MLA layer)"),
        "layer_prefill_bytes": (BYTES, "its bytes: projection weights (in weights_dtype), the "
                                       "prompt's K/V (MLA: latents) written and read back, "
                                       "activations"),
        "layer_prefill_flops": ("FLOPs", "its FLOPs: projections, QK^T and PV (causal)"),
        "layer_prefill_intensity": ("FLOP/byte", "FLOPs / bytes"),
        "layer_prefill_bound": ("", "`memory` or `compute`: the term that sets the time"),
        "layer_step_ms": ("ms", "one attention layer's decode step (a layer shape's: as "
                                "decode-speed times it)"),
        "layer_step_bytes": (BYTES, "its bytes (a 16-bit layer shape's: bytes_per_step of "
                                    "decode-speed)"),
        "layer_step_kv_bytes": (BYTES, "of them, the KV cache read and written"),
        "layer_step_flops": ("FLOPs", "its FLOPs (flops_per_step of decode-speed)"),
        "layer_step_intensity": ("FLOP/byte", "FLOPs / bytes"),
        "layer_step_bound": ("", "`memory` or `compute`"),
        "ttft_ms": ("ms", "the whole model's prefill: time to first token"),
        "prefill_bytes": (BYTES, "its bytes: every layer's, the MLP or active experts, "
                                 "the embeddings looked up and the head"),
        "prefill_flops": ("FLOPs", "its FLOPs (the head for the last token only)"),
        "prefill_intensity": ("FLOP/byte", "FLOPs / bytes"),
        "prefill_bound": ("", "`memory` or `compute`"),
        "tpot_ms": ("ms", "the whole model's decode step, launches and collectives "
                          "included: time per output token"),
        "step_bytes": (BYTES, "its bytes"),
        "step_weight_bytes": (BYTES, "of them, the weights one rank reads"),
        "step_kv_bytes": (BYTES, "of them, the KV cache read and written"),
        "step_state_bytes": (BYTES, "of those, a hybrid's state read and written (2 x its "
                                    "bytes)"),
        "step_flops": ("FLOPs", "its FLOPs"),
        "step_intensity": ("FLOP/byte", "FLOPs / bytes"),
        "step_bound": ("", "`memory` or `compute`"),
        "allreduce_ms": ("ms", "of the decode step, the tp collectives (2 all-reduces a "
                               "layer, 1 more an attention layer where q and k norms span "
                               "the heads, the logits' all-gather)"),
        "norm_allreduces": ("", "of those, the all-reduces of q and k norms that span the "
                                "heads (one an attention layer; 0: none)"),
        "tokens_per_s": ("tokens/s", "batch / tpot_ms (a layer shape: / layer_step_ms)"),
        "ridge_flops_per_byte": ("FLOP/byte", "the device's ridge point: effective peak "
                                              "FLOP/s / effective bandwidth"),
        "device_title": ("", "the device: its datasheet name, or this machine's"),
        "peak_gbps": ("GB/s", "the memory bandwidth predicted with: measured (a stream "
                              "benchmark's, or this machine's copy)"),
        "peak_tflops": ("TFLOP/s", "the dense matmul rate predicted with, in the matmuls' "
                                   "dtype (measured)"),
        "interconnect_gbps": ("GB/s", "the all-reduce bus bandwidth (nccl-tests busbw)"),
        "peaks_source": ("", "the datasheets, or what this machine measured"),
        "efficiency_bw": ("", "share of peak_gbps reached streaming weights and "
                              "activations"),
        "efficiency_kv": ("", "share of peak_gbps reached reading the KV cache"),
        "efficiency_flops": ("", "share of peak_tflops reached"),
        "overhead_us": ("us", "fixed time per layer per step"),
        "perf_model": ("", "the model's parameters in words, and where they came from"),
        "memory_bytes_needed_per_gpu": (BYTES, "a model's weights on one rank and the "
                                               "batch's KV cache at seq_len there (at "
                                               "seq_len + output_len with output_len), no "
                                               "reserve; empty for a layer shape"),
        "fits_memory": ("", "whether that fits in the named GPU's memory; the prediction "
                            "is made either way; empty for a layer shape or `this`"),
        "weights": ("", "quantised weights, as `int4 in groups of 128`; empty: in dtype"),
        "vocab": ("", "`replicated` where every rank holds the whole vocabulary; empty: split"),
        "ep": ("ranks", "ranks of the tp the routed experts are split whole over, the step "
                        "timed on the busiest; empty: each expert split over all tp"),
        "attention": ("", "`data-parallel` where each rank runs its own sequences' attention "
                          "with the whole attention; empty: split over the tp ranks"),
        "launch_ms": ("ms", "of the model's decode step, its kernels' launches"),
        "memory_latency_ms": ("ms", "of the model's decode step, its kernels' waits for their "
                                    "first bytes, one load latency from memory each"),
        "request_ttft_ms": ("ms", "the time to first token of one request prefilled alone, "
                                  "as `fit --ttft` counts it: ttft_ms at batch 1"),
        "dequant_ms": ("ms", "of the model's decode step, dequantising its weight-only int8 "
                             "or int4 weights; empty where none"),
        "padding_ms": ("ms", "of the model's decode step, the rows its matmuls compute as "
                             "zeros to fill whole tensor-core tiles; empty where none"),
        "warp_mma_ms": ("ms", "of the model's decode step, what its weight-only kernel on "
                              "the warp-level mma.sync (Marlin's) takes beyond the matmul "
                              "rate on a Hopper; empty elsewhere"),
        "output_len": ("tokens", "generated by each request after its prompt; empty: "
                                 "no generation predicted"),
        "generation_ms": ("ms", "the batch's whole generation: its prefill, then "
                                "output_len - 1 decode steps at the mean context"),
        "generation_tpot_ms": ("ms", "a decode step at the mean context, "
                                     "seq_len + output_len / 2"),
        "output_tokens_per_s": ("tokens/s", "the batch's output tokens over its whole "
                                            "generation"),
        "serving_itl_ms": ("ms", "between a request's tokens with batch requests kept in "
                                 "flight: that step plus the others' prefills, counted "
                                 "whole (data-parallel attention: one a rank, side by "
                                 "side)"),
        "device_figures": ("", "the device's measured figures, each with its source"),
    },
}
# fmt: on
RECORDS = {
    "params": (ParamsRecord, KINDS["params"].columns),
    "model_parts": (ModelPartRecord, columns.WHOLE_MODEL),
    "kvmem": (KvmemRecord, [*columns.KVMEM, *(c for _, g in columns.KVMEM_OPTIONS for c in g)]),
    "decode": (DecodeRecord, columns.DECODE),
    "fit": (FitRecord, KINDS["fit"].columns),
    "predict": (PredictRecord, KINDS["predict"].columns),
}


def row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def table(header: Sequence[str], rows: list[Sequence[Any]]) -> str:
    return "\n".join([row(header), row(["---"] * len(header)), *map(row, rows)])


def name_cell(name: str, below: str = "") -> str:
    """A field's name as code that wraps only after its underscores (a narrow column on a
    phone), with a second line in italics."""
    code = "<code>" + "_<wbr>".join(name.split("_")) + "</code>"
    return f"{code}<br><em>{below}</em>" if below else code


def fields_table(command: str) -> str:
    """Every field of the command's records: the table column that shows it, its unit,
    its kind and its meaning."""
    record_type, cols = RECORDS[command]
    headers: dict[str, list[str]] = {}
    for c in cols:  # a field may show in two columns: decode's step time and its spread
        headers.setdefault(c.field, []).append(c.header)
    rows, missing = [], []
    for f in dataclasses.fields(record_type):
        unit, meaning = FIELDS[command].get(f.name) or COMMON.get(f.name) or ("", "")
        if not meaning:
            missing.append(f.name)
        shown = ", ".join(headers.get(f.name, []))
        rows.append([name_cell(f.name, shown), unit, f.metadata["kind"].value, meaning])
    if missing:
        sys.exit(f"scripts/docs_tables.py: describe the {command} fields {', '.join(missing)}")
    return table(["Field <em>(table column)</em>", "Unit", "Kind", "Meaning"], rows)


TYPE_NAMES = {int: "integer", float: "number", bool: "true or false", str: "string"}


def shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _names(word: str, text: str) -> bool:
    """Whether `text` names `word` as a word of its own (bfloat16 does not name float16)."""
    return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", text) is not None


def schema_table() -> str:
    """Every field a sweep file (and the flags) can set."""
    rows = []
    for name, spec in schema.FIELDS.items():
        defaults = {s: spec.default_for(s) for s in spec.sections}
        given = {s: shown(v) for s, v in defaults.items() if v is not None}
        if len(given) == len(defaults) and len(set(given.values())) == 1:
            default = f"`{next(iter(given.values()))}`"
        else:
            default = "<br>".join(f"{s}: `{v}`" for s, v in given.items())
        meaning = spec.help
        if spec.maximum is schema.max_threads:
            meaning += f" From 1 to {schema.THREADS_PER_CPU} per CPU."
        elif spec.type in (int, float) and spec.upper is not None:
            low = f"from {spec.minimum:,}" if spec.type is int else "above 0"
            high = f"{spec.upper:g}" if spec.type is float else f"{spec.upper:,}"
            meaning += f" {low.capitalize()} to {high}."
        elif spec.choices and not all(_names(choice, spec.help) for choice in spec.choices):
            meaning += f" One of {', '.join(spec.choices)}."
        kind = TYPE_NAMES[spec.type] + (", or a list" if spec.axis else "")
        rows.append([name_cell(name, ", ".join(spec.sections)), kind, default, meaning])
    return table(["Key <em>(sections)</em>", "Type", "Default", "Meaning"], rows)


def models_table() -> str:
    """The presets: their architecture and where it comes from."""
    rows = [
        [
            f"`{p.name}`",
            p.num_layers,
            f"{p.d_model:,}",
            p.num_heads,
            p.num_kv_heads,
            p.head_dim,
            p.variant,
            p.dtype,
            p.source,
        ]
        for p in PRESETS.values()
    ]
    header = [
        "Name",
        "layers",
        "d_model",
        "heads",
        "kv heads",
        "head_dim",
        "Variant",
        "dtype",
        "Source",
    ]
    return table(header, rows)


def _tflops(value: float) -> str:
    return f"{value / 1e12:,.2f}".rstrip("0").rstrip(".")


def devices_table() -> str:
    """The named devices and their vendors' figures (attnbench.model.devices)."""
    rows = [
        [
            f"`{d.name}`",
            d.title,
            f"{d.memory_bytes / 1e9:,.0f} GB",
            f"{d.datasheet_bandwidth / 1e9:,.0f}",
            _tflops(d.datasheet_flops["bfloat16"]),
            _tflops(d.datasheet_flops["float8"]) if "float8" in d.datasheet_flops else "none",
            _tflops(d.datasheet_flops["float32"]),
            f"{d.interconnect}: {d.interconnect_bandwidth / 1e9:,.0f}"
            if d.interconnect_bandwidth
            else d.interconnect,
            ", ".join(f"[{i}]({url})" for i, url in enumerate(d.sources, 1)),
        ]
        for d in DEVICES.values()
    ]
    header = [
        "Name",
        "Device",
        "Memory",
        "Memory bandwidth",
        "bfloat16",
        "float8",
        "float32",
        "Interconnect",
        "Sources",
    ]
    return table(header, rows)


def _links(*texts: str, taken: str = "share of") -> str:
    """The URLs of `texts`, as numbered links; after `taken` where a text says the figure
    was not measured on the device (a share of a sibling's, or its figure as it is)."""
    urls = dict.fromkeys(re.findall(r"https://[^\s);]+", " ".join(texts)))
    links = ", ".join(f"[{i}]({url})" for i, url in enumerate(urls, 1))
    return f"{taken} {links}" if any(t.startswith("not measured") for t in texts) else links


def measured_table() -> str:
    """The figures the roofline uses, from published microbenchmarks, with their sources."""
    rows = []
    for d in DEVICES.values():
        c = d.collectives
        rows.append(
            [
                f"`{d.name}`",
                f"{d.memory_bandwidth / 1e9:,.0f} ({_links(d.bandwidth_source)})",
                _tflops(flops_for(d, "bfloat16")),
                _tflops(d.dense_flops["float8"]) if "float8" in d.dense_flops else "none",
                _links(d.flops_source),
                f"{_tflops(d.attention_flops)} ({_links(d.attention_source)})"
                if d.attention_flops
                else "as bfloat16",
                f"{c.latency_s * 1e6:.3g} us + {c.step_s * 1e6:.2g} us a step, "
                f"{c.bus_bandwidth / 1e9:,.0f} GB/s ({_links(c.source)})"
                if c
                else "none known",
                f"{d.launch_s * 1e6:.3g} us",
                f"{d.memory_latency_s * 1e9:,.0f} ns "
                f"({_links(d.memory_latency_source, taken='as')})",
            ]
        )
    header = [
        "Name",
        "Memory GB/s",
        "bfloat16",
        "float8",
        "Matmul sources",
        "Attention",
        "All-reduce: latency, bus bandwidth",
        "Launch",
        "Load latency",
    ]
    return table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=("schema", "fields", "models", "devices", "measured"))
    parser.add_argument("command", nargs="?", choices=tuple(RECORDS))
    args = parser.parse_args()
    if args.table == "fields" and args.command is None:
        parser.error("fields: name the command")
    if args.table == "schema":
        print(schema_table())
    elif args.table == "models":
        print(models_table())
    elif args.table == "devices":
        print(devices_table())
    elif args.table == "measured":
        print(measured_table())
    else:
        print(fields_table(args.command))


if __name__ == "__main__":
    main()
