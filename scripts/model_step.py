"""A whole model's decode step and prefill, timed on this device, beside what
`attnbench predict` says of the same points on a named GPU: a check of the prediction
against a step whose every kernel is known (cuBLAS matmuls, torch's fused attention),
replayed from a CUDA graph as serving engines run decode steps.

The model is a preset's decoder as gpt-fast writes one, with random weights in bfloat16:
token embeddings; per layer an RMSNorm, one fused q/k/v projection (with its bias where
the preset has one), rotary positions, attention over a preallocated KV cache, the output
projection, an RMSNorm, a fused gate and up projection, SiLU, the down projection; a final
RMSNorm and the output head on each sequence's last token. `--fp8-models` are timed with
float8 weights too, each matmul's input quantised per tensor first (Float8Linear). A
decode step feeds one token per sequence with `context` tokens cached; a prefill feeds
`context` tokens. Each point's step is captured in its own graph (on the CPU, run
eagerly, to check the script) and timed as a median over blocks of replays. Each row
also counts the kernels one eager decode step of its model and batch runs (torch's
profiler), beside the count the model takes (its predicted decode step's).

    PYTHONPATH=. python3 scripts/model_step.py --gpu h200 --json results/gpu/model-step.json
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from attnbench.experiments.decode import capture_graph
from attnbench.measure.environment import collect_environment
from attnbench.measure.stats import Measurement
from attnbench.measure.timing import Timer
from attnbench.model.architecture import ModelSpec
from attnbench.model.devices import device_spec
from attnbench.model.generation import generation
from attnbench.model.presets import get_preset
from attnbench.modules.attention import folded_decode

DTYPE = "bfloat16"
#: (phase, batch, context) of each point: decode steps at small and large batches and
#: short and long contexts, prefills of short and long prompts.
POINTS = (
    *(("decode", b, c) for b in (1, 16, 64) for c in (512, 4096)),
    *(("prefill", 1, c) for c in (128, 512, 2048, 8192)),
)
#: The float8 model's points: decode steps at three batches, two prefills.
FP8_POINTS = (*(("decode", b, 512) for b in (1, 16, 64)), ("prefill", 1, 512), ("prefill", 1, 2048))
#: The most the KV cache of one point may take of the device's memory.
CACHE_SHARE = 0.5


def supported(spec: ModelSpec) -> str | None:
    """Why this script cannot build `spec`'s decoder, or None."""
    body = spec.body
    if body is None or spec.mla is not None or body.moe is not None:
        return "not a dense decoder with a known body"
    if spec.windows and any(w is not None for w in spec.windows):
        return "sliding-window layers"
    if not body.gated_mlp or body.mlp_bias or body.o_bias or body.qk_norm or body.norm_bias:
        return "a layer other than Llama's (gated MLP, RMSNorm, no biases but q/k/v's)"
    if body.position_embeddings or body.attention_sinks or body.head_bias:
        return "learned positions, attention sinks or a head bias"
    if body.norms_per_layer != 2:
        return f"{body.norms_per_layer} norms a layer"
    return None


FP8_MAX = torch.finfo(torch.float8_e4m3fn).max


class Float8Linear:
    """A weight in float8_e4m3fn with one float32 scale, times activations quantised per
    tensor as they come (their largest magnitude to FP8_MAX), through torch._scaled_mm (a
    private op; the rows name it), out in bfloat16: vLLM's dynamic per-tensor float8."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.scale = (weight.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
        self.weight = (weight / self.scale).to(torch.float8_e4m3fn)  # (out, in), row-major
        self.bias = bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        scale = (flat.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
        quantised = (flat / scale).to(torch.float8_e4m3fn)
        out = torch._scaled_mm(
            quantised, self.weight.t(), scale_a=scale, scale_b=self.scale, out_dtype=x.dtype
        )
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], -1)


def plain_linear(weight: torch.Tensor, bias: torch.Tensor | None):
    return lambda x: F.linear(x, weight, bias)


#: How each weights' dtype multiplies: the matmul's path, and the linear layer it builds.
LINEARS = {
    "bfloat16": ("torch F.linear", plain_linear),
    "float8_e4m3fn": ("torch._scaled_mm", Float8Linear),
}


@dataclass
class Decoder:
    """The weights and KV cache of a Llama-style decoder, and its forward pass."""

    spec: ModelSpec
    batch: int
    max_len: int
    device: torch.device
    weights: str = DTYPE

    def __post_init__(self) -> None:
        s, body, dt, dev = self.spec, self.spec.body, torch.bfloat16, self.device
        d, hd, heads, kv = s.d_model, s.head_dim, s.num_heads, s.num_kv_heads

        def weight(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, device=dev, dtype=dt) / math.sqrt(shape[-1])

        linear = LINEARS[self.weights][1]
        # the embeddings and the output head stay in bfloat16 beside float8 weights
        self.embed = weight(body.vocab_size, d)
        self.head = self.embed if body.tied_embeddings else weight(body.vocab_size, d)
        qkv = (heads + 2 * kv) * hd
        self.layers = [
            {
                "norm1": torch.ones(d, device=dev, dtype=dt),
                "qkv": linear(weight(qkv, d), weight(qkv) if body.qkv_bias else None),
                "o": linear(weight(d, heads * hd), None),
                "norm2": torch.ones(d, device=dev, dtype=dt),
                "w13": linear(weight(2 * body.intermediate_size, d), None),
                "w2": linear(weight(d, body.intermediate_size), None),
            }
            for _ in range(s.num_layers)
        ]
        self.norm = torch.ones(d, device=dev, dtype=dt)
        cache = (s.num_layers, self.batch, kv, self.max_len, hd)
        self.k_cache = torch.zeros(cache, device=dev, dtype=dt)
        self.v_cache = torch.zeros(cache, device=dev, dtype=dt)
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=dev).float() / hd))
        angles = torch.outer(torch.arange(self.max_len, device=dev).float(), inv)
        self.cos = torch.cat([angles.cos()] * 2, dim=-1).to(dt)
        self.sin = torch.cat([angles.sin()] * 2, dim=-1).to(dt)

    def _rope(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x (B, heads, T, hd) rotated at positions start..start+T-1."""
        t = x.shape[2]
        cos, sin = self.cos[start : start + t], self.sin[start : start + t]
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """The logits of each sequence's last token, `tokens` (B, T) at positions
        start..start+T-1, the cache filled before start."""
        s = self.spec
        heads, kv, hd = s.num_heads, s.num_kv_heads, s.head_dim
        b, t = tokens.shape
        if t > 1 and start:
            raise ValueError(f"a prefill starts at position 0 (attends its own tokens): {start}")
        end = start + t
        x = F.embedding(tokens, self.embed)
        for i, w in enumerate(self.layers):
            h = F.rms_norm(x, (s.d_model,), w["norm1"])
            qkv = w["qkv"](h).view(b, t, heads + 2 * kv, hd)
            q, k, v = qkv.transpose(1, 2).split((heads, kv, kv), dim=1)
            q, k = self._rope(q, start), self._rope(k, start)
            self.k_cache[i, :, :, start:end] = k
            self.v_cache[i, :, :, start:end] = v
            if t == 1:
                keys, values = self.k_cache[i, :, :, :end], self.v_cache[i, :, :, :end]
                o = folded_decode(q, keys, values)
            else:  # KV heads repeated, so that the causal prefill takes the flash kernel
                groups = heads // kv
                k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + w["o"](o.transpose(1, 2).reshape(b, t, heads * hd))
            h = F.rms_norm(x, (s.d_model,), w["norm2"])
            gate, up = w["w13"](h).chunk(2, dim=-1)
            x = x + w["w2"](F.silu(gate) * up)
        last = F.rms_norm(x[:, -1], (s.d_model,), self.norm)
        return F.linear(last, self.head)


def predicted(
    spec: ModelSpec, gpu: str, phase: str, batch: int, context: int, weights: str
) -> tuple[float, int]:
    """What `attnbench predict --gpu GPU --weights-dtype WEIGHTS` says of the point, with
    the stated defaults: the ms of the prefill of `context` tokens, or of the step after
    it; and the kernels the model counts for that decode step."""
    found = generation(spec, device_spec(gpu), batch, context, 1, DTYPE, weights=weights)
    ms = (found.tpot_s if phase == "decode" else found.ttft_s) * 1e3
    return ms, found.step.counts.kernels  # the step after a 1-token output: at `context`


#: The cached tokens of the decode step whose kernels are counted.
COUNTED_AT = 16


def kernels_per_step(decoder: Decoder, device: torch.device) -> int | str:
    """The kernels (and copies) one eager decode step with COUNTED_AT tokens cached runs
    on the GPU, as torch's profiler counts them (a longer context may take other
    attention kernels); on the CPU, or where the profiler fails, why not."""
    if device.type != "cuda":
        return "not counted on the CPU"
    tokens = torch.zeros(decoder.batch, 1, dtype=torch.long, device=device)
    decoder.forward(tokens, COUNTED_AT)
    torch.cuda.synchronize(device)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            decoder.forward(tokens, COUNTED_AT)
            torch.cuda.synchronize(device)
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    except Exception as error:  # the count is extra: a profiler that fails loses it alone
        return f"not counted: {str(error)[:120]}"


def time_point(decoder: Decoder, phase: str, context: int, device, samples: int):
    """The step's times in ms: a decode step with `context` cached, or a prefill of it."""
    b = decoder.batch
    if phase == "decode":
        tokens, start = torch.zeros(b, 1, dtype=torch.long, device=device), context
    else:
        tokens, start = torch.zeros(b, context, dtype=torch.long, device=device), 0
    step = lambda: decoder.forward(tokens, start)  # noqa: E731
    if device.type == "cuda":
        step = capture_graph(step, None, device)
    number = 10 if phase == "decode" else 2
    step()
    return Measurement.of_samples(Timer(device).time_blocks(step, samples, number))


def run(
    specs: list[ModelSpec],
    gpu: str,
    device: torch.device,
    samples: int,
    points,
    weights: str = DTYPE,
) -> list[dict]:
    """A row per model and point that fits: measured and predicted times, the weights in
    `weights` (a key of LINEARS)."""
    rows = []
    memory = (
        torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    )
    for spec in specs:
        name = spec.name
        kv_token = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2
        for batch in sorted({p[1] for p in points}):
            mine = [p for p in points if p[1] == batch]
            max_len = max(c for _, _, c in mine) + 1
            if memory is not None and kv_token * batch * max_len > CACHE_SHARE * memory:
                fits = [p for p in mine if kv_token * batch * (p[2] + 1) <= CACHE_SHARE * memory]
                for p in set(mine) - set(fits):
                    print(f"  {name} b{batch} s{p[2]}: left out, its cache over half the memory")
                mine, max_len = fits, max((c for _, _, c in fits), default=0) + 1
            if not mine:
                continue
            decoder = Decoder(spec, batch, max_len, device, weights)
            kernels = kernels_per_step(decoder, device)
            for phase, _, context in mine:
                m = time_point(decoder, phase, context, device, samples)
                predicted_ms, model_kernels = predicted(spec, gpu, phase, batch, context, weights)
                row = {
                    "model": name,
                    "weights": weights,
                    "matmul": LINEARS[weights][0],
                    "phase": phase,
                    "batch": batch,
                    "context": context,
                    "measured_ms": m.median_ms,
                    "p25_ms": m.p25_ms,
                    "p75_ms": m.p75_ms,
                    "samples_ms": m.samples_ms,
                    "graph": device.type == "cuda",
                    "decode_step_kernels": kernels,
                    "predicted_step_kernels": model_kernels,
                    "predicted_ms": predicted_ms,
                    "error": predicted_ms / m.median_ms - 1,
                }
                rows.append(row)
                short = "fp8" if weights == "float8_e4m3fn" else "bf16"
                print(
                    f"  {name:10} {short:4} {phase:7} b{batch:<3} s{context:<5}: "
                    f"{m.median_ms:8.3f} ms, predicted {predicted_ms:8.3f} ({row['error']:+.0%})"
                )
            del decoder
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="h200", help="the named GPU predicted (default h200)")
    parser.add_argument("--models", default="llama-2-7b,llama-3-8b,qwen2.5-7b")
    parser.add_argument(
        "--fp8-models", default="llama-3-8b", help="models timed in float8 too ('' for none)"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--small", action="store_true", help="two layers, one decode and one prefill point"
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    points = (("decode", 1, 16), ("prefill", 1, 16)) if args.small else POINTS
    environment = collect_environment(device)
    print(f"== whole-model steps on {environment.get('device_name')}, predicted for {args.gpu}")
    print("  (b: batch, s: context; measured, then predicted and its error)")
    specs = [get_preset(name) for name in args.models.split(",")]
    if args.small:  # a check of the script itself, on the CPU
        specs = [replace(spec, num_layers=2) for spec in specs]
    for spec in specs:
        if why := supported(spec):
            parser.error(f"--models: {spec.name}: {why}")
    rows = run(specs, args.gpu, device, args.samples, points)
    fp8_points = points if args.small else FP8_POINTS
    for spec in (s for s in specs if s.name in args.fp8_models.split(",")):
        try:  # each model alone: one that fails keeps the others' rows
            rows += run([spec], args.gpu, device, args.samples, fp8_points, "float8_e4m3fn")
        except (RuntimeError, TypeError) as error:  # a torch without float8 matmuls here
            print(f"  {spec.name} float8: not run ({str(error)[:60]})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        document = {"environment": environment, "gpu": args.gpu, "rows": rows}
        args.json.write_text(json.dumps(document, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
