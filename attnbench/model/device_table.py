"""The named GPUs: each vendor's figures, and what published microbenchmarks measured of it.

Vendor figures (docs/devices.md says the same for readers):

- FLOP/s are dense, without structured sparsity. A figure given only with sparsity is
  halved, as the datasheets' footnotes say sparsity doubles it.
- Memory is the vendor's stated capacity in decimal units: "80GB" is 80 * 10**9 bytes.
- Interconnect bandwidth is per GPU and per direction: a figure the vendor states for
  both directions together (NVLink 4: 900 GB/s) is halved. Cards without NVLink or
  Infinity Fabric give their PCIe slot's rate.

Measured figures, the ones the roofline uses (each names its source):

- memory bandwidth: a STREAM-style kernel's (BabelStream or cuda-stream triad);
- matmul FLOP/s: the best a large GEMM reaches (cuBLAS, hipBLASLt, or the maximum
  achievable matmul FLOPS of a shape sweep), per dtype where measured; a dtype not
  measured takes the datasheet peak times the share bfloat16 reaches on the same device;
- all-reduce: the bus bandwidth of large messages from nccl-tests (rccl-tests) on 8 GPUs
  of one node, and the latency of the collective library's own cost model (NCCL's
  tuning.cc, RCCL's): a base and one more per step of its low-latency ring, 2 * (n - 1)
  steps for an all-reduce over n GPUs. That is the GPU's part of a small all-reduce, what
  a decode step replayed from a graph pays; nccl-tests' back-to-back 8 KiB times are 2 to
  3 times more, and engines' one-kernel all-reduces (vLLM, SGLang, TensorRT-LLM) take
  5.7 to 9.3 us for 4,096 elements on 8x H100
  (https://github.com/sgl-project/sglang/pull/2904), below the model's 15;
- kernel launch: the gap between consecutive kernels replayed from a CUDA graph, as
  serving engines run decode steps;
- memory latency: a pointer chase's load from memory past every cache (gpu-benches'
  gpu-latency), which each kernel waits for its first bytes;
- the tensor-core tile: not a measurement but the instruction set's, the rows (tokens)
  of the smallest tile the tensor or matrix cores multiply at their full rate (16 for
  Ampere's and Ada's mma.sync and CDNA's MFMA, 64 for Hopper's wgmma and Blackwell's
  tcgen05.mma).

A device with no published measurement of a figure takes the share of the datasheet that
the nearest measured device of the same memory or chip family reaches, and says so in the
figure's source. No figure is fitted to an end-to-end inference measurement: those are
for checking (docs/validation.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from .device_types import Collectives, DeviceSpec, Figure, Protocol

_T = 1e12  # tera
_G = 1e9  # giga

# The vendors' datasheets and whitepapers.
_NVIDIA_DATASHEET = (
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
)
_HOPPER_WHITEPAPER = "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
_H200_DATASHEET = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"
_A100_DATASHEET = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_L40S_DATASHEET = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_L40_DATASHEET = "https://www.nvidia.com/en-us/data-center/l40/"
_L4_DATASHEET = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_RTX6000_ADA_DATASHEET = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/rtx-6000/"
    "proviz-rtx-6000-ada-datasheet.pdf"
)
_A10_DATASHEET = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf"
)
#: AWS's A10G (EC2 G5) has no datasheet of its own: AWS states its memory (24 GiB; the
#: table keeps the A10 datasheet's 24 GB) and nothing of its rates.
_AWS_G5 = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/accelerated-computing-instances.html"
#: The A40's datasheet, as a reseller's copy of it gives it (48 GB of GDDR6 at 696 GB/s;
#: dense 37.4 TFLOPS in FP32, 74.8 in TF32, 149.7 in BF16 and FP16 with FP32 accumulation,
#: 299.3 in INT8; NVLink 112.5 GB/s both ways to one other card, PCIe Gen4 64 GB/s).
_A40_DATASHEET = (
    "https://www.ecer.com/corp/details-uuuedqa-p1bsay9-multi-display-setups-supported-by-"
    "48gb-gddr6-ecc-memory-nvidia-a40-gpu-and-vga-outputs.html"
)
#: The L20 (AD102, 275 W): 48 GB of GDDR6 at 864 GB/s and 59.35 TFLOPS in FP32 (a
#: database of GPU specifications), 119.5 TFLOPS dense in FP16 on its tensor cores (a
#: GEMM study's stated peak: "113.76/119.5=95.19% TFLOPS utilization").
_L20_SPECS = "https://technical.city/pl/video/L20"
_L20_TENSOR = (
    "https://github.com/xlite-dev/LeetCUDA/blob/5a9666734fb72d7e62f295b7cf68ca367a1084ca/"
    "hgemm/README.md"
)
_ADA_WHITEPAPER = (
    "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
)
_MI300X_DATASHEET = (
    "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
    "amd-instinct-mi300x-data-sheet.pdf"
)
_ACCELERATORS = "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
#: HGX B200's figures for eight GPUs, with sparsity (float4: 144 PFLOPS, 9,000 TFLOPS dense a
#: GPU; float8: 72 PFLOPS, 4,500).
_HGX = "https://www.nvidia.com/en-us/data-center/hgx/"
#: B200's memory as its driver reports it: a 7,680-bit bus at 3,996 MHz, double data rate,
#: 7,672 GB/s, where tables of 2024 give 8,000 from an 8,192-bit bus (NVIDIA's Blackwell
#: datasheet of 2025: 7.7 TB/s).
_B200_BUS = "https://github.com/pytorch/ao/pull/4002"
#: The B300 (Blackwell Ultra) in a roofline table of NVIDIA's own aiconfigurator (a fork's
#: copy, the upstream file not found), from NVIDIA's Blackwell Ultra datasheet: dense 2,250
#: TFLOPS in bfloat16, 4,500 in float8, 14,000 in float4, 153.5 in int8; 7.75 TB/s (62 TB/s
#: over 8 GPUs); 275,040 MiB as nvidia-smi reports it (288 GB).
_B300_DATASHEET = (
    "https://resources.nvidia.com/en-us-blackwell-architecture/blackwell-ultra-datasheet"
)
_B300_ROOFLINE = (
    "https://github.com/simone-chen/aiconfigurator/blob/"
    "84ba8996240b8e7b2d95f2c194aaae6842008d9e/src/aiconfigurator/systems/b300_sxm.yaml"
)
#: HGX B300's figures a GPU (a page reproducing NVIDIA's table): 75 TFLOPS in float32,
#: 1,125 in tfloat32 (dense).
_B300_SPECS = "https://glennklockwood.com/garden/processors/B300"
#: The H800 and the H20, Hopper parts for the Chinese market: the H800 is the H100 SXM5 (the
#: same GH100, 80 GB of HBM3) with its NVLink cut to 400 GB/s both ways (a DeepSeek engineer:
#: "400GB/s is the bidirectional theoretical figure"); the H20's dense rates are 148 TFLOPS in
#: bfloat16 and 296 in float8 (Ant Group's table beside the H800's 989 and 1,979), 74 in
#: tfloat32 and 44 in float32, on 96 GB of HBM3 at 4.0 TB/s and NVLink at 900 GB/s.
_H800_NVLINK = "https://github.com/deepseek-ai/DeepSeek-V3/issues/28"
_H800_VS_H100 = (
    "https://www.philisun.com/technical-analysis/"
    "nvidia-h800-vs-h100-a-technical-deep-dive-into-politically-defined-ai-chips/"
)
_H20_RATES = "https://lmsys.org/blog/2025-09-26-sglang-ant-group/"
_H20_SPECS = "https://zangshuxian.com/new/674733024499207168"
_H20_MEMORY = "https://willitrunai.com/es/gpus/h20-96gb"
#: The A800 is the A100 with its NVLink cut from 600 to 400 GB/s both ways, "core compute,
#: memory, and Tensor Core capabilities ... left unchanged".
_A800 = "https://aiwiki.ai/wiki/nvidia_a800"
#: The GH200's Hopper GPU: the H100 SXM's rates, 96 GB of HBM3 at 4.0 TB/s (its first
#: version; a later one has 141 GB of HBM3e), joined to its Grace CPU by NVLink-C2C, 900 GB/s
#: both ways.
_GH200_C2C = "https://datacrunch.io/blog/data-movement-in-the-nvidia-gh200-grace-hopper-superchip"

# The microbenchmarks.
_AZURE = "https://github.com/Azure/AI-benchmarking-guide/blob/"
_AZURE_H100 = (
    _AZURE + "f350e7e65b82cfcb9220b32b582bc34342d9c1a6/Azure%20Results/ND_H100_v5_results.md"
)
_AZURE_H200 = (
    _AZURE + "7f20e5fa3b2f9a46d8404af1f6fb14b049d6d5cc/Azure_Results/ND_H200_v5_results.md"
)
_AZURE_A100 = (
    _AZURE + "3bb66cacc25632d8ece36bc1d5128c5ea886a60b/Azure_Results/ND_A100_v4_results.md"
)
_AZURE_MI300X = (
    "https://github.com/samuel-bohman/AI-benchmarking-guide/blob/"
    "3de0c294fd1059a91a2c158712c4a078619d73e8/Azure_Results/ND_MI300X_v5_results.md"
)
_GPU_BENCHES = "https://github.com/te42kyfo/gpu-benches/blob/"
_STREAM_H100_PCIE = (
    _GPU_BENCHES + "cdcc732d189f02cb90cf3d04cd20ea8d2c5fbd3f/cuda-stream/h100_pcie.txt"
)
_STREAM_A100_40 = _GPU_BENCHES + "a7dc559cc5a1d09e62b6b0fbb99ee165039acba4/gpu-stream/a100_40.txt"
_STREAM_L40 = _GPU_BENCHES + "0a45416b2118f4f355cef2af0daa2ec38fe25513/gpu-stream/l40.txt"
_STREAM_A40 = _GPU_BENCHES + "0a45416b2118f4f355cef2af0daa2ec38fe25513/gpu-stream/a40.txt"
#: A copy kernel on an RTX 4090 (float4 loads and stores, two buffers of 256 Mi + 2
#: floats, read and written bytes over one launch's time): 921.85 GB/s.
_COPY_RTX_4090 = (
    "https://github.com/xytpai/nvbench/blob/017724fd497c56bc1b54b7050500a470d02d1934/README.md"
)
#: A STREAM-like triad in bfloat16 on a GB300 (Blackwell Ultra, as the B300, beside a Grace
#: CPU): "7.140 TB/s (triad, BLOCK=2048, warps=8)".
_TRIAD_GB300 = (
    "https://github.com/meta-pytorch/KernelAgent/blob/"
    "2d8ed0d518e2c5ec834a1acd1bc41607d7591a7f/oink/benchmarks/README.md"
)
#: A PyTorch matmul sweep (square sizes to 10,240) on a device that reports itself as an
#: "NVIDIA A10G" (its notes' host line is the template's, naming an A100).
_A10G_MATMUL = "https://github.com/zzc0721/torch-performance-test-data/issues/126"
#: The same sweep's L4 (a physical machine), A40 and L20 runs: torch.mm of squares to
#: 10,240, each dtype's best size.
_L4_MATMUL = "https://github.com/zzc0721/torch-performance-test-data/issues/120"
_A40_MATMUL = "https://github.com/zzc0721/torch-performance-test-data/issues/185"
_L20_MATMUL = "https://github.com/zzc0721/torch-performance-test-data/issues/107"
_MAMF = _ACCELERATORS + "#maximum-achievable-matmul-flops-comparison-table"
#: A PyTorch matmul sweep's table (torch.mm of squares to 10,240, the best size's TFLOPS):
#: its A800, H20, L40S and RTX 4090 24GB rows (the 48GB cards, modified, left out).
_TORCH_MATMULS = (
    "https://github.com/zzc0721/torch-performance-test-data/blob/"
    "078586871da31ad6aaaf6fa43bc4ec3f284b151d/database.md"
)
#: Attention kernels' forward pass, causal, bfloat16, head dim 128, 64 query and 8 KV heads,
#: 8,192 tokens (cuDNN's attention benchmark, each backend's TFLOPS of the halved causal
#: count): the fastest backend of each GPU, FlashAttention-2 on an A100 80GB PCIe (217; cuDNN
#: 177), FlashAttention-4 on an H200 (675; cuDNN 655).
_ATTENTION_RUNS = (
    "https://github.com/NVIDIA/cudnn-frontend/blob/816ea4573a686de51cb494a1f349aba166bc58d2/"
    "benchmark/attention_training/results/llama3.1/"
)
_A100_ATTENTION_RUN = _ATTENTION_RUNS + "a100/llama3.1_20260928_133751.csv"
_H200_ATTENTION_RUN = _ATTENTION_RUNS + "h200/llama3.1_20260928_130009.csv"
#: FlashAttention-3's benchmark on an H20, causal forward, head dim 128, 2,048 tokens: "Fav3:
#: 0.319ms, 107.8 TFLOPS" (cuDNN the same); the same issue's runs of 16,384 tokens were
#: not read (the copy at hand stops before them).
_H20_ATTENTION_RUN = "https://github.com/Dao-AILab/flash-attention/issues/1310"
_H20_ATTENTION = Figure(107.8, f"FlashAttention-3, causal, 2,048 tokens, H20: {_H20_ATTENTION_RUN}")
#: nccl-tests' all-reduce on one node of eight H800s: "the reported allreduce busBW is 215
#: GB/s" (the message size not stated).
_NCCL_H800_TEST = "https://github.com/NVIDIA/nccl/issues/1374"
_NETWORK = (
    "https://github.com/stas00/ml-engineering/blob/0cc3de50b2dd083c34d848a1dcb5bfe65fe3dace/"
    "network/benchmarks/README.md"
)

#: The one published launch figure: the gap between all-reduce kernels replayed from a
#: captured CUDA graph on a B200. No per-device figure was found; every device takes it.
_LAUNCH = Figure(2.5e-6, f"CUDA-graph replay gap between kernels, 8x B200: {_NETWORK}")


_NCCL_TUNING = (
    "https://github.com/NVIDIA/nccl/blob/b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2/"
    "src/graph/tuning.cc"
)
_SGLANG_ALLREDUCE = "https://github.com/sgl-project/sglang/pull/2904"
#: The latency of a small all-reduce in NCCL's own cost model: its low-latency ring
#: protocol (LL) pays a base latency and one per ring step, 2*(n-1) steps for an
#: all-reduce. nccl-tests' back-to-back 8 KiB times on whole nodes are higher (43 us on 8x
#: A100, 27 us on 8x H100, in the sources below); engines' own one-shot all-reduces,
#: measured on 8x H100, take 5.7-9.3 us at 4 KiB and 7.8-11.8 us at 32 KiB.
_NCCL_LL_BASE_S = 6.6e-6
_ENGINE_CHECK = f"one-shot all-reduces of engines on 8x H100: {_SGLANG_ALLREDUCE}"
#: NCCL's ring protocols as its cost model times them (tuning.cc: baseLat, hwLat, and the
#: refinements of each protocol's bus bandwidth): LL sends a quarter of the bandwidth, at
#: most llMaxBws' 87.7 GB/s (Ampere and Hopper, one node), LL128 0.92 of it, Simple all of
#: it at a higher latency. LL128 is enabled over NVLink only. A collective takes the
#: fastest, as NCCL picks it; the all-gather's LL share (a third) is taken as the
#: all-reduce's, and the per-channel caps, which need the channels' count, are left out.
_NCCL_PROTOCOLS = {
    "NVLink": (
        Protocol("LL", _NCCL_LL_BASE_S, 0.6e-6, 1 / 4, 87.7 * _G),
        Protocol("LL128", 14.0e-6, 1.9e-6, 0.92),
        Protocol("Simple", 8.4e-6, 3.4e-6, 1.0),
    ),
    "PCIe": (
        Protocol("LL", _NCCL_LL_BASE_S, 1.0e-6, 1 / 4, 87.7 * _G),
        Protocol("Simple", 8.4e-6, 5.7e-6, 1.0),
    ),
}


_PTX = "https://docs.nvidia.com/cuda/parallel-thread-execution/index.html"
_MATRIX_CORES = "https://gpuopen.com/learn/amd-lab-notes/amd-lab-notes-matrix-cores-readme/"
#: The rows of the smallest tile each generation's tensor (matrix) cores multiply, from
#: its instruction set: a matmul over fewer tokens computes the tile whole ("tile
#: quantization", as NVIDIA's guide calls it at the scale of a thread block's tile:
#: https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/).
_MMA_SYNC = Figure(
    16,
    f"mma.sync m16n8k16 (16-bit) and m16n8k32 (float8 on Ada), Ampere's and Ada's "
    f"full-rate warp-level tensor-core shapes, M 16: {_PTX}#warp-level-matrix-shape",
)
_WGMMA = Figure(
    64,
    f"wgmma.mma_async m64nNk16 (16-bit) and m64nNk32 (float8), Hopper's full-rate "
    f"warpgroup-level shapes, all of M 64: {_PTX}#asynchronous-warpgroup-level-matrix-shape",
)
_TCGEN05 = Figure(
    64, f"tcgen05.mma on one CTA, M 64 or 128 (Blackwell): {_PTX}#tcgen05-matrix-shape"
)
#: The fewest tokens the serving engines' fused MoE kernels tile one expert's into, where
#: the tensor cores' shape would take more: each expert's tokens go to the next power of
#: two from it up to the shape's rows. Hopper: Triton's fused MoE (vLLM's and SGLang's),
#: blocks of M 16 at a few tokens an expert (SGLang's tuned DeepSeek-V3 configuration on
#: the H200 from 1 to 512 tokens; vLLM's default up to as many tokens as experts);
#: Blackwell: TensorRT-LLM's generated MoE kernels (FlashInfer's too), whose CTA tile is
#: the next power of two of the tokens an expert, from 8.
_HOPPER_EXPERTS = Figure(
    16,
    "Triton fused MoE, BLOCK_SIZE_M 16: https://github.com/sgl-project/sglang/blob/"
    "a30914814bdd6a1c4f7e854b41eb3b8451bf8bab/python/sglang/srt/layers/moe/fused_moe_triton/"
    "configs/triton_3_3_1/E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,"
    "block_shape=%5B128,%20128%5D.json, https://github.com/vllm-project/vllm/blob/"
    "13cb3e44373beb1c8b9d2c017f565af6f7a1b601/vllm/model_executor/layers/fused_moe/fused_moe.py",
)
_BLACKWELL_EXPERTS = Figure(
    8,
    "TensorRT-LLM's calculate_tile_tokens_dim, from 8: https://github.com/NVIDIA/TensorRT-LLM/"
    "blob/b35ac1b64368513d215c57d2ed01d62d910df8da/tensorrt_llm/_torch/custom_ops/"
    "trtllm_gen_custom_ops.py",
)
_EXPERT_TILES = {_WGMMA: _HOPPER_EXPERTS, _TCGEN05: _BLACKWELL_EXPERTS}
_HOPPER_MMA_RUNS = (
    "https://github.com/Johnsonms/NVIDIA-Hopper-Benchmark/blob/"
    "374a9f1622a84985b4cd970619189f688b66b4dd/reproduction/H100-dapperdingo/raw"
)
#: The share of a Hopper's matmul rate a kernel on Ampere's warp-level mma.sync reaches
#: (Marlin's weight-only kernels): on an H100 SXM the instruction's microbenchmark, m16n8k16
#: in 16 bits with float32 accumulation, reaches 668.332 TFLOPS over the whole kernel, and
#: wgmma m64n256k16 with random operands 901.924 (the suite of arXiv 2402.13499, rerun on
#: that card; its mma.sync operands are not zeros, so wgmma's are not taken at zero, where
#: it reaches 976.599 and the share would be 0.684); vLLM's Machete kernel was written for
#: it ("at best ~75% of peak" with mma).
#: Blackwell's is not measured: its matmul rate.
_HOPPER_WARP_MMA = Figure(
    668.332 / 901.924,
    f"mma.sync m16n8k16 668.332 TFLOPS over wgmma m64n256k16 901.924, both on an H100 SXM: "
    f"{_HOPPER_MMA_RUNS}/mma_m16n8k16.log, {_HOPPER_MMA_RUNS}/wgmma_fp16.log; "
    "vLLM's Machete, at best ~75% of peak with mma: "
    "https://github.com/vllm-project/vllm/pull/7174",
)
#: The other Hoppers' share: the H100 SXM's, not measured on them.
_HOPPER_WARP_MMA_TAKEN = replace(
    _HOPPER_WARP_MMA, source=f"not measured: as the H100 SXM's, {_HOPPER_WARP_MMA.source}"
)
# Memory latency: a pointer chase, one thread loading a chain of addresses spread over a
# buffer past every cache (gpu-benches' gpu-latency), at the largest buffer each run
# measured (over a gigabyte, as a model's weights span): the run's time over its loads.
_XXRJUN_LATENCY = (
    "https://github.com/xxrjun/gpu-benches/blob/3be3ab1eb02f0ed51151db899b8e3ef7a834f108/"
    "gpu-latency"
)
_XXRJUN_MI300X_LATENCY = (
    "https://github.com/xxrjun/gpu-benches/blob/c1cad2a10b96c02e6f14333ca7b93fdeb17a2e48/"
    "gpu-latency/mi300x.txt"
)
#: Another chase's table: cycles at unlocked clocks, no clock stated, but for a B300 with
#: its clocks locked.
_MARKDEWING_LATENCY = (
    "https://github.com/markdewing/AI_kernels/blob/ba553f450a2f1dc619c92119f17851cb70554d85/"
    "latency/README.md"
)


def _chase(card: str, buffer_kb: float, ms: float, loads: int, run: str) -> Figure:
    """A memory latency in ns: `card`'s pointer chase of `loads` loads over a buffer of
    `buffer_kb` kB in `ms` ms, as its file `run` states them."""
    return Figure(
        ms * 1e6 / loads,
        f"pointer chase past every cache, {card}: a buffer of {buffer_kb:,} kB, {ms:,} ms for "
        f"{loads:,} loads: {run}",
    )


def _latency_as(figure: Figure, of: str, cycles: int = 0) -> Figure:
    """`figure` for a device not measured in ns, of the same chip or memory as `of`; where
    the other chase's table has the device's own run, its `cycles` at unlocked clocks (no
    clock stated) are said beside it."""
    own = ""
    if cycles:
        own = f"its own chase {cycles} cycles at an unstated clock ({_MARKDEWING_LATENCY}); "
    return replace(figure, source=f"not measured in ns: {own}as the {of}, {figure.source}")


_A100_80_LATENCY = _chase("A100 80GB", 1178534, 3688.7, 9428272, f"{_XXRJUN_LATENCY}/a100_80.txt")
_A100_40_LATENCY = _chase(
    "A100 40GB",
    1529075,
    9970.5,
    24465205,
    _GPU_BENCHES + "2f9158840909a373a52a7ec7b0acddbc2ccf10b0/cuda-latency/a100_40.txt",
)
_A40_LATENCY = _chase("A40", 1178534, 3016.6, 9428272, f"{_XXRJUN_LATENCY}/a40.txt")
_L40_LATENCY = _chase("L40", 2018581.2, 4040.6, 16148650, f"{_XXRJUN_LATENCY}/l40.txt")
_H100_PCIE_LATENCY = _chase(
    "H100 PCIe",
    1529075,
    9177.7,
    24465205,
    _GPU_BENCHES + "a7dc559cc5a1d09e62b6b0fbb99ee165039acba4/gpu-latency/h100_pcie.txt",
)
_GH200_LATENCY = _chase("GH200", 2475235, 6786.4, 19801884, f"{_XXRJUN_LATENCY}/gh200.txt")
_MI300X_LATENCY = _chase("MI300X", 2143794.6, 7434.8, 17150357, _XXRJUN_MI300X_LATENCY)
_MI210_LATENCY = _chase(
    "MI210",
    1529075,
    9570.5,
    24465205,
    _GPU_BENCHES + "a7dc559cc5a1d09e62b6b0fbb99ee165039acba4/gpu-latency/mi210.txt",
)
_B300_LATENCY = Figure(
    810 / 2.032,
    f"pointer chase past every cache, B300: 810 cycles with its clocks locked at 2,032 MHz: "
    f"{_MARKDEWING_LATENCY}",
)
_GH100 = "GH200's (the same GH100)"
_HOPPER_LATENCY = _latency_as(_GH200_LATENCY, _GH100)
_A100_80_LATENCY_TAKEN = _latency_as(_A100_80_LATENCY, "A100 80GB's (GA100, HBM2e)")
_ADA_LATENCY = _latency_as(_L40_LATENCY, "L40's (Ada, GDDR6)")

_MFMA = Figure(
    16,
    f"MFMA 16x16x16 (16-bit) and 16x16x32 (float8 on CDNA3), the smallest single-block "
    f"matrix-core shapes of CDNA2 and CDNA3: {_MATRIX_CORES}",
)


def _nccl(busbw_gbs: float, busbw_source: str, link: str = "NVLink") -> Collectives:
    """Collectives with NCCL's cost model over `link` (its ring protocols, the fastest
    taken) and a measured bus bandwidth (GB/s)."""
    protocols = _NCCL_PROTOCOLS[link]
    low_latency = protocols[0]
    return Collectives(
        low_latency.base_s,
        busbw_gbs * _G,
        f"protocols: NCCL's cost model of its rings over {link} ({_NCCL_TUNING}; the "
        f"low-latency one checked against {_ENGINE_CHECK}); bus bandwidth: {busbw_source}",
        low_latency.step_s,
        protocols,
    )


_NCCL_H100 = _nccl(
    478.87, f"nccl-tests all_reduce_perf, 8x H100 NVLink 4, 8G busbw 478.87: {_AZURE_H100}"
)
_NCCL_H200 = _nccl(
    479.98, f"nccl-tests all_reduce_perf, 8x H200 NVLink 4, 8G busbw 479.98: {_AZURE_H200}"
)
_NCCL_A100 = _nccl(
    231.58,
    f"nccl-tests all_reduce_perf, 8x A100 SXM4 80GB NVLink 3, 8G busbw 231.58: {_AZURE_A100}",
)
_NCCL_B200 = _nccl(838.97, f"all_reduce_bench, 8x B200, 16GiB busbw 838.97: {_NETWORK}")
_NCCL_H800 = _nccl(
    215, f"nccl-tests all_reduce_perf, 8x H800 NVLink 4 at 400 GB/s, busbw 215: {_NCCL_H800_TEST}"
)
#: No all-reduce of A800s was found: the A100's measured bus bandwidth over NVLink 3 (231.58
#: GB/s of its 300 a direction), at the A800's 200 a direction.
_NCCL_A800 = _nccl(
    231.58 * 200 / 300,
    f"not measured: the A100 SXM4's 231.58 GB/s of NVLink 3's 300 a direction, at the A800's "
    f"200 ({_AZURE_A100}; {_A800})",
)
_RCCL_TUNING = (
    "https://github.com/ROCm/rccl/blob/9e22c79d8dccb80075967c2a03f1a921c253c867/src/graph/tuning.cc"
)
#: RCCL's cost model (its tuning models with low-latency ranges, those of the MI300
#: generation): a 12 us base and 0.8 us a ring step over Infinity Fabric.
_RCCL_MI300X = Collectives(
    12e-6,
    316.82 * _G,
    f"latency: RCCL's cost model for its low-latency ring, 12 us + 0.8 us a step "
    f"({_RCCL_TUNING}); bus bandwidth: rccl-tests all_reduce_perf, 8x MI300X Infinity "
    f"Fabric, 8G busbw 316.82: {_AZURE_MI300X}",
    0.8e-6,
)


@dataclass(frozen=True)
class _Measured:
    """One device's microbenchmarks: the memory bandwidth in GB/s, matmul TFLOPS by dtype
    (bfloat16 at least), its collectives."""

    bandwidth: Figure
    matmul: Mapping[str, Figure]
    collectives: Collectives | None


def _share(measured: float, datasheet: float, of: str, source: str) -> Figure:
    """A share of the datasheet that another device reaches, for a device not measured."""
    return Figure(measured / datasheet, f"not measured: the share {of} reaches ({source})")


# Shares of the datasheet reached by the measured devices, for their unmeasured siblings.
_HBM3_HOPPER = _share(2970, 3350, "an H100 SXM, triad 2,970 of 3,350 GB/s,", _AZURE_H100)
_HBM2E_A100 = _share(1700, 2039, "an A100 SXM4 80GB, triad 1,700 of 2,039 GB/s,", _AZURE_A100)
_GDDR6_ADA = _share(
    803,
    864,
    "an L40, triad 803 of 864 GB/s,",
    _STREAM_L40,
)
_GDDR6_AMPERE = _share(663, 696, "an A40 (GA102), gpu-stream triad 663 of 696 GB/s,", _STREAM_A40)
_HBM3E = _share(4150, 4800, "an H200, triad 4,150 of 4,800 GB/s,", _AZURE_H200)
_HBM_CDNA = _share(4090, 5300, "an MI300X, triad 4,090 of 5,300 GB/s,", _AZURE_MI300X)
_HOPPER_GEMM = _share(794.5, 989.4, "an H100 SXM, 794.5 of 989.4 TFLOPS in bfloat16,", _MAMF)
_BLACKWELL_ULTRA_HBM = _share(
    7140, 8000, "a GB300, triad 7,140 of 8,000 GB/s (576 over 72 GPUs),", _TRIAD_GB300
)
# The attention kernels' rates: measured, or the share of the datasheet's bfloat16 the
# measured sibling of the same chip reaches.
_A100_ATTENTION = Figure(
    217, f"FlashAttention-2, causal, 8,192 tokens, A100 80GB PCIe: {_A100_ATTENTION_RUN}"
)
_AMPERE_ATTENTION = _share(
    217, 312, "an A100 80GB PCIe's FlashAttention-2, 217 of 312 TFLOPS,", _A100_ATTENTION_RUN
)
_H200_ATTENTION = Figure(
    675, f"FlashAttention-4, causal, 8,192 tokens, H200: {_H200_ATTENTION_RUN}"
)
_HOPPER_ATTENTION = _share(
    675, 989.4, "an H200's FlashAttention-4, 675 of 989.4 TFLOPS,", _H200_ATTENTION_RUN
)
_SAME_GH100_ATTENTION = replace(
    _H200_ATTENTION, source=f"as the H200, the same GH100: {_H200_ATTENTION.source}"
)


def _device(
    name: str,
    title: str,
    memory_gb: int,
    bandwidth_gbs: float,
    tflops: dict[str, float],
    interconnect: str,
    interconnect_gbs: float | None,
    sources: tuple[str, ...],
    bandwidth: Figure,
    matmul: Mapping[str, Figure],
    collectives: Collectives | None = None,
    *,
    mma: Figure,
    attention: Figure | None = None,
    warp_mma: Figure | None = None,
    latency: Figure | None = None,
) -> DeviceSpec:
    """A spec from the vendor's units (GB, GB/s, TFLOPS, GB/s per direction) and the
    measured figures: `bandwidth` in GB/s, or a share of the datasheet (a value at most 1);
    `matmul` TFLOPS by dtype, or {"share": a share} for a device not measured; `mma` the
    rows of its smallest tensor-core tile; `attention` a 16-bit attention kernel's TFLOPS,
    or a share of the datasheet's bfloat16 (None: not measured on its chip); `warp_mma`
    the share of the matmul rate a kernel on mma.sync reaches where that is not the
    device's full-rate instruction (None: it is, or not measured); `latency` a load's
    from memory past the last cache, in ns (None: not measured on its chip). A dtype not
    measured takes the datasheet peak times bfloat16's measured share."""
    achieved_gbs = bandwidth.value * (bandwidth_gbs if bandwidth.value <= 1 else 1)
    if "share" in matmul:
        share, flops_source = matmul["share"].value, matmul["share"].source
        measured: dict[str, float] = {}
    else:
        share = matmul["bfloat16"].value / tflops["bfloat16"]
        measured = {d: f.value for d, f in matmul.items()}
        flops_source = "; ".join(f"{d}: {f.source}" for d, f in matmul.items())
        if set(tflops) - set(matmul):
            flops_source += f"; other dtypes: the datasheet's times bfloat16's share {share:.2f}"
    achieved = {d: measured.get(d, v * share) for d, v in tflops.items()}
    attention_tflops = 0.0
    if attention is not None:
        scale = tflops["bfloat16"] if attention.value <= 1 else 1
        attention_tflops = attention.value * scale
    return DeviceSpec(
        name=name,
        title=title,
        memory_bytes=memory_gb * 10**9,
        memory_bandwidth=achieved_gbs * _G,
        dense_flops=MappingProxyType({d: v * _T for d, v in achieved.items()}),
        collectives=collectives,
        launch_s=_LAUNCH.value,
        interconnect=interconnect,
        datasheet_bandwidth=bandwidth_gbs * _G,
        datasheet_flops=MappingProxyType({d: v * _T for d, v in tflops.items()}),
        interconnect_bandwidth=interconnect_gbs * _G if interconnect_gbs else None,
        sources=sources,
        bandwidth_source=bandwidth.source,
        flops_source=flops_source,
        launch_source=_LAUNCH.source,
        mma_rows=int(mma.value),
        mma_source=mma.source,
        expert_rows=int(_EXPERT_TILES[mma].value) if mma in _EXPERT_TILES else 0,
        expert_source=_EXPERT_TILES[mma].source if mma in _EXPERT_TILES else "",
        attention_flops=attention_tflops * _T,
        attention_source=attention.source if attention is not None else "",
        warp_mma_share=warp_mma.value if warp_mma is not None else 1.0,
        warp_mma_source=warp_mma.source if warp_mma is not None else "",
        memory_latency_s=latency.value * 1e-9 if latency is not None else 0.0,
        memory_latency_source=latency.source if latency is not None else "",
    )


_NCCL_TOPO = (
    "https://github.com/NVIDIA/nccl/blob/b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2/src/graph/topo.cc"
)
#: A PCIe lane's rate as NCCL's topology takes it (kvDictPciGen, in 100 Mb/s), by
#: generation: 16 GT/s for Gen4, 32 GT/s for Gen5, less their encoding.
_PCIE_LANE_RATE = {4: 120, 5: 240}


def _pcie(generation: int, link: str) -> Collectives:
    """Collectives over PCIe, where no nccl-tests figure was found: the x16 link's
    bandwidth as NCCL's topology models it (ncclTopoAddPci: lanes x a lane's rate / 80, in
    GB/s: 24 for Gen4, 48 for Gen5) as the bus bandwidth, and NCCL's latency model for
    PCIe."""
    rate = _PCIE_LANE_RATE[generation]
    gbs = 16 * rate / 80
    how = f"16 lanes x {rate} (100 Mb/s a lane) / 80 = {gbs:g} GB/s ({_NCCL_TOPO})"
    return _nccl(gbs, f"not measured: {link} as NCCL's topology models it, {how}", "PCIe")


# Dense TFLOPS of the H100 SXM5 in the Hopper whitepaper (its datasheet rounds the figures
# with sparsity: 1,979 for bfloat16); the H200 is the same GH100 at the same clocks.
_H100_SXM_TFLOPS = {
    "float32": 66.9,
    "tfloat32": 494.7,
    "bfloat16": 989.4,
    "float16": 989.4,
    "float8": 1978.9,
    "int8": 1978.9,
}
# The NVL cards (H100 NVL, H200 NVL): the datasheets' figures with sparsity, halved.
_NVL_TFLOPS = {
    "float32": 60,
    "tfloat32": 835 / 2,
    "bfloat16": 1671 / 2,
    "float16": 1671 / 2,
    "float8": 3341 / 2,
    "int8": 3341 / 2,
}
# The A100 datasheet gives dense | sparse, the same for its SXM4 and PCIe cards; A100 has
# no float8.
_A100_TFLOPS = {"float32": 19.5, "tfloat32": 156, "bfloat16": 312, "float16": 312, "int8": 624}
# The L40 datasheet gives dense | sparse.
_L40_TFLOPS = {
    "float32": 90.5,
    "tfloat32": 90.5,
    "bfloat16": 181.05,
    "float16": 181.05,
    "float8": 362,
    "int8": 362,
}

_H100_SXM = _Measured(
    Figure(2970, f"BabelStream triad, ND H100 v5: {_AZURE_H100}"),
    {
        "bfloat16": Figure(794.5, f"maximum achievable matmul FLOPS: {_MAMF}"),
        "float8": Figure(1402.6, f"maximum achievable matmul FLOPS: {_MAMF}"),
    },
    _NCCL_H100,
)
_A100_PCIE_GEMM = {
    "bfloat16": Figure(252.9, f"maximum achievable matmul FLOPS, A100 PCIe: {_MAMF}")
}
_A100_SXM = _Measured(
    Figure(1700, f"BabelStream triad, ND A100 v4 (A100 SXM4 80GB): {_AZURE_A100}"),
    {"bfloat16": Figure(271.2, f"maximum achievable matmul FLOPS: {_MAMF}")},
    _NCCL_A100,
)

_TABLE = (
    _device(
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        80,
        3350,
        _H100_SXM_TFLOPS,
        "NVLink 4",
        900 / 2,
        (_NVIDIA_DATASHEET, _HOPPER_WHITEPAPER),
        _H100_SXM.bandwidth,
        _H100_SXM.matmul,
        _H100_SXM.collectives,
        mma=_WGMMA,
        latency=_latency_as(_GH200_LATENCY, _GH100, cycles=700),
        warp_mma=_HOPPER_WARP_MMA,
        attention=_SAME_GH100_ATTENTION,
    ),
    # The PCIe card's NVLink bridge joins two cards only: collectives among more go over
    # its PCIe Gen5 x16 slot, 128 GB/s both ways.
    _device(
        "h100-pcie",
        "NVIDIA H100 PCIe 80GB",
        80,
        2000,
        {
            "float32": 51.2,
            "tfloat32": 378,
            "bfloat16": 756,
            "float16": 756,
            "float8": 1513,
            "int8": 1513,
        },
        "PCIe Gen5 x16",
        128 / 2,
        (_NVIDIA_DATASHEET, _HOPPER_WHITEPAPER),
        Figure(
            1832,
            f"cuda-stream triad, H100 PCIe: {_STREAM_H100_PCIE}",
        ),
        {"share": _HOPPER_GEMM},
        _pcie(5, "PCIe Gen5 x16"),
        mma=_WGMMA,
        latency=_H100_PCIE_LATENCY,
        warp_mma=_HOPPER_WARP_MMA_TAKEN,
        attention=_HOPPER_ATTENTION,
    ),
    _device(
        "h100-nvl",
        "NVIDIA H100 NVL 94GB",
        94,
        3900,
        _NVL_TFLOPS,
        "PCIe Gen5 x16",
        128 / 2,
        (_NVIDIA_DATASHEET,),
        _HBM3_HOPPER,
        {"share": _HOPPER_GEMM},
        _pcie(5, "PCIe Gen5 x16 (the NVLink bridge joins two cards only)"),
        mma=_WGMMA,
        latency=_HOPPER_LATENCY,
        warp_mma=_HOPPER_WARP_MMA_TAKEN,
        attention=_HOPPER_ATTENTION,
    ),
    _device(
        "h200",
        "NVIDIA H200 SXM 141GB",
        141,
        4800,
        _H100_SXM_TFLOPS,
        "NVLink 4",
        900 / 2,
        (_H200_DATASHEET, _HOPPER_WHITEPAPER),
        Figure(4150, f"BabelStream triad, ND H200 v5: {_AZURE_H200}"),
        {
            "bfloat16": Figure(
                794.5, f"maximum achievable matmul FLOPS (as the H100 SXM): {_MAMF}"
            ),
            "float8": Figure(1453.4, f"maximum achievable matmul FLOPS: {_MAMF}"),
        },
        _NCCL_H200,
        mma=_WGMMA,
        latency=_HOPPER_LATENCY,
        warp_mma=_HOPPER_WARP_MMA_TAKEN,
        attention=_H200_ATTENTION,
    ),
    # The H800: the H100 SXM5 (the same GH100, memory and clocks), its NVLink cut to 400 GB/s
    # both ways.
    _device(
        "h800",
        "NVIDIA H800 SXM5 80GB",
        80,
        3350,
        _H100_SXM_TFLOPS,
        "NVLink 4",
        400 / 2,
        (_NVIDIA_DATASHEET, _HOPPER_WHITEPAPER, _H800_VS_H100, _H800_NVLINK),
        Figure(2970, f"BabelStream triad of the H100 SXM, the same memory: {_AZURE_H100}"),
        {
            dtype: replace(figure, source=f"as the H100 SXM, the same GH100: {figure.source}")
            for dtype, figure in _H100_SXM.matmul.items()
        },
        _NCCL_H800,
        mma=_WGMMA,
        latency=_HOPPER_LATENCY,
        warp_mma=_HOPPER_WARP_MMA_TAKEN,
        attention=_SAME_GH100_ATTENTION,
    ),
    # The H20: a Hopper with few tensor-core FLOP/s (148 TFLOPS dense in bfloat16) on HBM3.
    _device(
        "h20",
        "NVIDIA H20 96GB",
        96,
        4000,
        {
            "float32": 44,
            "tfloat32": 74,
            "bfloat16": 148,
            "float16": 148,
            "float8": 296,
            "int8": 296,
        },
        "NVLink 4",
        900 / 2,
        (_H20_RATES, _H20_SPECS, _H20_MEMORY),
        _HBM3_HOPPER,
        {
            "bfloat16": Figure(141.86, f"torch.mm, H20 96GB: {_TORCH_MATMULS}"),
            "float16": Figure(141.73, f"torch.mm, H20 96GB: {_TORCH_MATMULS}"),
        },
        replace(_NCCL_H100, source=f"not measured: as the H100's NVLink 4, {_NCCL_H100.source}"),
        mma=_WGMMA,
        latency=_HOPPER_LATENCY,
        warp_mma=_HOPPER_WARP_MMA_TAKEN,
        attention=_H20_ATTENTION,
    ),
    # The GH200's Hopper GPU, 96 GB version: a single GPU here (its peers are reached over
    # the network or an NVLink switch system, not a node's NVSwitch): tensor parallelism is
    # refused.
    _device(
        "gh200",
        "NVIDIA GH200 96GB (its Hopper GPU)",
        96,
        4000,
        _H100_SXM_TFLOPS,
        "none to other GPUs here (NVLink-C2C joins it to its Grace CPU)",
        None,
        (_ACCELERATORS, _GH200_C2C),
        _HBM3_HOPPER,
        {
            "bfloat16": Figure(
                828.6, f"maximum achievable matmul FLOPS, the 141 GB HBM3e version: {_MAMF}"
            ),
            "float8": Figure(
                1535.0, f"maximum achievable matmul FLOPS, the 141 GB HBM3e version: {_MAMF}"
            ),
        },
        mma=_WGMMA,
        latency=_GH200_LATENCY,
        warp_mma=_HOPPER_WARP_MMA_TAKEN,
        attention=_SAME_GH100_ATTENTION,
    ),
    _device(
        "h200-nvl",
        "NVIDIA H200 NVL 141GB",
        141,
        4800,
        _NVL_TFLOPS,
        "PCIe Gen5 x16",
        128 / 2,
        (_H200_DATASHEET,),
        _HBM3E,
        {"share": _HOPPER_GEMM},
        _pcie(5, "PCIe Gen5 x16 (the NVLink bridge joins two or four cards)"),
        mma=_WGMMA,
        latency=_HOPPER_LATENCY,
        warp_mma=_HOPPER_WARP_MMA_TAKEN,
        attention=_HOPPER_ATTENTION,
    ),
    _device(
        "a100-80gb",
        "NVIDIA A100 SXM4 80GB",
        80,
        2039,
        _A100_TFLOPS,
        "NVLink 3",
        600 / 2,
        (_A100_DATASHEET,),
        _A100_SXM.bandwidth,
        _A100_SXM.matmul,
        _A100_SXM.collectives,
        mma=_MMA_SYNC,
        latency=_A100_80_LATENCY,
        attention=_AMPERE_ATTENTION,
    ),
    # The A800: the A100 SXM4 80GB's GA100 and memory, its NVLink cut to 400 GB/s both ways.
    _device(
        "a800-80gb",
        "NVIDIA A800 SXM4 80GB",
        80,
        2039,
        _A100_TFLOPS,
        "NVLink 3",
        400 / 2,
        (_A100_DATASHEET, _A800),
        Figure(1700, f"BabelStream triad of the A100 SXM4 80GB, the same memory: {_AZURE_A100}"),
        {
            "bfloat16": Figure(266.48, f"torch.mm, A800 SXM4 80GB: {_TORCH_MATMULS}"),
            "float16": Figure(266.04, f"torch.mm, A800 SXM4 80GB: {_TORCH_MATMULS}"),
        },
        _NCCL_A800,
        mma=_MMA_SYNC,
        latency=_A100_80_LATENCY_TAKEN,
        attention=_AMPERE_ATTENTION,
    ),
    _device(
        "a100-40gb",
        "NVIDIA A100 SXM4 40GB",
        40,
        1555,
        _A100_TFLOPS,
        "NVLink 3",
        600 / 2,
        (_A100_DATASHEET,),
        Figure(
            1375,
            f"gpu-stream triad, A100 40GB: {_STREAM_A100_40}",
        ),
        _A100_SXM.matmul,
        _NCCL_A100,
        mma=_MMA_SYNC,
        latency=_A100_40_LATENCY,
        attention=_AMPERE_ATTENTION,
    ),
    _device(
        "a100-pcie-80gb",
        "NVIDIA A100 PCIe 80GB",
        80,
        1935,
        _A100_TFLOPS,
        "PCIe Gen4 x16",
        64 / 2,
        (_A100_DATASHEET,),
        _HBM2E_A100,
        _A100_PCIE_GEMM,
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_A100_80_LATENCY_TAKEN,
        attention=_A100_ATTENTION,
    ),
    _device(
        "a100-pcie-40gb",
        "NVIDIA A100 PCIe 40GB",
        40,
        1555,
        _A100_TFLOPS,
        "PCIe Gen4 x16",
        64 / 2,
        (_A100_DATASHEET,),
        _HBM2E_A100,
        _A100_PCIE_GEMM,
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_latency_as(_A100_40_LATENCY, "A100 40GB's (GA100, HBM2)"),
        attention=_AMPERE_ATTENTION,
    ),
    # The L40S datasheet gives dense | sparse; it has no NVLink. Its memory takes the L40's
    # share: the one L40S run found (gpu-benches' gpu-roofline, 690 GB/s: nalinipradash/
    # gpu-benches e345d3d, L40S-48GB-unchangedfreq.txt) throttles to 420 MHz at 88 C.
    _device(
        "l40s",
        "NVIDIA L40S 48GB",
        48,
        864,
        {
            "float32": 91.6,
            "tfloat32": 183,
            "bfloat16": 362.05,
            "float16": 362.05,
            "float8": 733,
            "int8": 733,
        },
        "PCIe Gen4 x16",
        64 / 2,
        (_L40S_DATASHEET,),
        _GDDR6_ADA,
        {
            "bfloat16": Figure(269.15, f"torch.mm, L40S (a container): {_TORCH_MATMULS}"),
            "float16": Figure(264.02, f"torch.mm, L40S (a container): {_TORCH_MATMULS}"),
        },
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_ADA_LATENCY,
    ),
    _device(
        "l40",
        "NVIDIA L40 48GB",
        48,
        864,
        _L40_TFLOPS,
        "PCIe Gen4 x16",
        64 / 2,
        (_L40_DATASHEET,),
        Figure(
            803,
            f"gpu-stream triad, L40: {_STREAM_L40}",
        ),
        {"share": _HOPPER_GEMM},
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_L40_LATENCY,
    ),
    # The RTX 6000 Ada is the AD102 of the L40 and L40S (142 SMs) at a 2,505 MHz boost.
    # Its datasheet gives 48 GB at 960 GB/s, 91.1 TFLOPS in FP32 and one tensor figure,
    # 1,457 TFLOPS in FP8 with sparsity: the L40S's (1,466 at 2,520 MHz), not the L40's
    # (724), so its dense rates are taken as the L40S datasheet gives them, halves of
    # that figure down the dtypes: 728.5 in FP8 and INT8, 364.25 in BF16 and FP16 (FP32
    # accumulation at full rate, as on the L40S; the L40 and GeForce cards run it at half).
    _device(
        "rtx-6000-ada",
        "NVIDIA RTX 6000 Ada Generation 48GB",
        48,
        960,
        {
            "float32": 91.1,
            "tfloat32": 1457 / 8,
            "bfloat16": 1457 / 4,
            "float16": 1457 / 4,
            "float8": 1457 / 2,
            "int8": 1457 / 2,
        },
        "PCIe Gen4 x16",
        64 / 2,
        (_RTX6000_ADA_DATASHEET, _L40S_DATASHEET),
        _GDDR6_ADA,
        {"share": _HOPPER_GEMM},
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_ADA_LATENCY,
    ),
    # AWS's A10G: the A10's datasheet for its memory (24 GB at 600 GB/s, the same GDDR6),
    # its rates measured: the A10G's tensor cores reach about half the A10's datasheet
    # rates (125 TFLOPS dense in bfloat16).
    _device(
        "a10g",
        "NVIDIA A10G 24GB (AWS G5)",
        24,
        600,
        {
            "float32": 31.2,
            "tfloat32": 62.5,
            "bfloat16": 125,
            "float16": 125,
            "int8": 250,
        },
        "PCIe Gen4 x16",
        64 / 2,
        (_A10_DATASHEET, _AWS_G5),
        _GDDR6_AMPERE,
        {
            "bfloat16": Figure(69.47, f"PyTorch matmul 10240^3, A10G: {_A10G_MATMUL}"),
            "float16": Figure(69.47, f"PyTorch matmul 10240^3, A10G: {_A10G_MATMUL}"),
            "tfloat32": Figure(34.71, f"PyTorch matmul 10240^3, A10G: {_A10G_MATMUL}"),
            "float32": Figure(23.37, f"PyTorch matmul 4096^3, A10G: {_A10G_MATMUL}"),
        },
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_latency_as(_A40_LATENCY, "A40's (GA102, GDDR6)"),
    ),
    # The A40: GA102 (as the A10G), BF16 and FP16 at full rate with FP32 accumulation; its
    # NVLink bridge joins two cards only: collectives among more go over PCIe.
    _device(
        "a40",
        "NVIDIA A40 48GB",
        48,
        696,
        {"float32": 37.4, "tfloat32": 74.8, "bfloat16": 149.7, "float16": 149.7, "int8": 299.3},
        "PCIe Gen4 x16",
        64 / 2,
        (_A40_DATASHEET,),
        Figure(663, f"gpu-stream triad, A40: {_STREAM_A40}"),
        {
            "bfloat16": Figure(122.29, f"PyTorch matmul 10240^3, A40: {_A40_MATMUL}"),
            "float16": Figure(119.18, f"PyTorch matmul 10240^3, A40: {_A40_MATMUL}"),
            "tfloat32": Figure(59.52, f"PyTorch matmul 8192^3, A40: {_A40_MATMUL}"),
            "float32": Figure(23.73, f"PyTorch matmul 8192^3, A40: {_A40_MATMUL}"),
        },
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_A40_LATENCY,
    ),
    # The L20: AD102 at 275 W. Its TF32 is half and its FP8 and INT8 twice the 16-bit rate,
    # as Ada's tensor cores run them (the L40's datasheet).
    _device(
        "l20",
        "NVIDIA L20 48GB",
        48,
        864,
        {
            "float32": 59.35,
            "tfloat32": 119.5 / 2,
            "bfloat16": 119.5,
            "float16": 119.5,
            "float8": 2 * 119.5,
            "int8": 2 * 119.5,
        },
        "PCIe Gen4 x16",
        64 / 2,
        (_L20_SPECS, _L20_TENSOR, _L40_DATASHEET),
        _GDDR6_ADA,
        {
            "bfloat16": Figure(114.14, f"PyTorch matmul 8192^3, L20: {_L20_MATMUL}"),
            "float16": Figure(113.26, f"PyTorch matmul 4096^3, L20: {_L20_MATMUL}"),
            "tfloat32": Figure(58.16, f"PyTorch matmul 10240^3, L20: {_L20_MATMUL}"),
            "float32": Figure(37.27, f"PyTorch matmul 2048^3, L20: {_L20_MATMUL}"),
        },
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_ADA_LATENCY,
    ),
    # The L4 datasheet gives the tensor-core figures with sparsity only: halved here.
    _device(
        "l4",
        "NVIDIA L4 24GB",
        24,
        300,
        {
            "float32": 30.3,
            "tfloat32": 120 / 2,
            "bfloat16": 242 / 2,
            "float16": 242 / 2,
            "float8": 485 / 2,
            "int8": 485 / 2,
        },
        "PCIe Gen4 x16",
        64 / 2,
        (_L4_DATASHEET,),
        _GDDR6_ADA,
        {
            "bfloat16": Figure(70.89, f"PyTorch matmul 2048^3, L4: {_L4_MATMUL}"),
            "float16": Figure(68.83, f"PyTorch matmul 2048^3, L4: {_L4_MATMUL}"),
            "tfloat32": Figure(31.88, f"PyTorch matmul 2048^3, L4: {_L4_MATMUL}"),
            "float32": Figure(15.38, f"PyTorch matmul 2048^3, L4: {_L4_MATMUL}"),
        },
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_ADA_LATENCY,
    ),
    # The Ada whitepaper's GeForce RTX 4090 figures with FP32 accumulation (the GeForce
    # cards run FP16 and BF16 at half rate when they accumulate in FP32, as frameworks do).
    _device(
        "rtx-4090",
        "NVIDIA GeForce RTX 4090 24GB",
        24,
        1008,
        {
            "float32": 82.6,
            "tfloat32": 82.6,
            "bfloat16": 165.2,
            "float16": 165.2,
            "float8": 330.3,
            "int8": 660.6,
        },
        "PCIe Gen4 x16",
        64 / 2,
        (_ADA_WHITEPAPER,),
        Figure(921.85, f"copy kernel, RTX 4090: {_COPY_RTX_4090}"),
        {
            "bfloat16": Figure(
                166.575,
                "torch.mm, the median of four RTX 4090 24GB runs (170.06 and 173.31 on "
                f"physical machines, 162.39 and 163.09 in containers): {_TORCH_MATMULS}",
            ),
            "float16": Figure(
                166.44,
                "torch.mm, the median of the same four (165.08, 171.06; 162.35, 167.80): "
                f"{_TORCH_MATMULS}",
            ),
        },
        _pcie(4, "PCIe Gen4 x16"),
        mma=_MMA_SYNC,
        latency=_latency_as(_L40_LATENCY, "L40's (AD102)", cycles=636),
    ),
    _device(
        "b200",
        "NVIDIA B200 180GB",
        180,
        7672,
        {
            "float32": 80,
            "tfloat32": 1125,
            "bfloat16": 2250,
            "float16": 2250,
            "float8": 4500,
            "int8": 4500,
            "float4": 9000,
        },
        "NVLink 5",
        1800 / 2,
        (_ACCELERATORS, _HGX, _B200_BUS),
        _HBM3E,
        {
            "bfloat16": Figure(1745.0, f"maximum achievable matmul FLOPS: {_MAMF}"),
            "float8": Figure(3432.5, f"maximum achievable matmul FLOPS: {_MAMF}"),
        },
        _NCCL_B200,
        mma=_TCGEN05,
        latency=_latency_as(
            _B300_LATENCY, "B300's (Blackwell, HBM3e; 848 cycles unlocked)", cycles=860
        ),
    ),
    # The B300 (Blackwell Ultra) on the B200's NVLink 5 platform: its float4 rate up by 56%,
    # its int8 cut to a thirtieth. Its memory is timed as a GB300's (the same chip).
    _device(
        "b300",
        "NVIDIA B300 288GB",
        288,
        7750,
        {
            "float32": 75,
            "tfloat32": 1125,
            "bfloat16": 2250,
            "float16": 2250,
            "float8": 4500,
            "int8": 153.5,
            "float4": 14000,
        },
        "NVLink 5",
        1800 / 2,
        (_B300_DATASHEET, _B300_ROOFLINE, _B300_SPECS),
        _BLACKWELL_ULTRA_HBM,
        {
            "bfloat16": Figure(1769.0, f"maximum achievable matmul FLOPS: {_MAMF}"),
            "float8": Figure(3353.3, f"maximum achievable matmul FLOPS: {_MAMF}"),
        },
        replace(_NCCL_B200, source=f"not measured: as the B200's NVLink 5, {_NCCL_B200.source}"),
        mma=_TCGEN05,
        latency=_B300_LATENCY,
    ),
    # Dense figures of the MI300X datasheet. Seven Infinity Fabric links of 128 GB/s (both
    # ways) join each GPU to the seven others of a platform: 896 GB/s in all, 448 per
    # direction.
    _device(
        "mi300x",
        "AMD Instinct MI300X 192GB",
        192,
        5300,
        {
            "float32": 163.4,
            "tfloat32": 653.7,
            "bfloat16": 1307.4,
            "float16": 1307.4,
            "float8": 2614.9,
            "int8": 2614.9,
        },
        "Infinity Fabric",
        7 * 128 / 2,
        (_MI300X_DATASHEET,),
        Figure(4090, f"BabelStream triad, ND MI300X v5: {_AZURE_MI300X}"),
        {
            "bfloat16": Figure(668.4, f"maximum achievable matmul FLOPS: {_MAMF}"),
            "float8": Figure(1159.23, f"hipBLASLt GEMM 8192^3, ND MI300X v5: {_AZURE_MI300X}"),
        },
        _RCCL_MI300X,
        mma=_MFMA,
        latency=_MI300X_LATENCY,
    ),
    # The MI325X sits on the MI300X's platform: the same seven Infinity Fabric links.
    _device(
        "mi325x",
        "AMD Instinct MI325X 256GB",
        256,
        6000,
        {
            "float32": 163.4,
            "tfloat32": 653.7,
            "bfloat16": 1300,
            "float16": 1300,
            "float8": 2610,
            "int8": 2600,
        },
        "Infinity Fabric",
        7 * 128 / 2,
        (_ACCELERATORS,),
        _HBM_CDNA,
        {"bfloat16": Figure(784.9, f"maximum achievable matmul FLOPS: {_MAMF}")},
        replace(_RCCL_MI300X, source=f"not measured: as the MI300X's node, {_RCCL_MI300X.source}"),
        mma=_MFMA,
        latency=_latency_as(_MI300X_LATENCY, "MI300X's (CDNA3; its HBM3e not measured)"),
    ),
    # One GCD of an MI250X, the device a framework sees: half the package's memory,
    # bandwidth and FLOP/s (128 GB, 3,276.8 GB/s, 383 TFLOPS bfloat16); no float8.
    _device(
        "mi250x",
        "AMD Instinct MI250X, one GCD (64GB)",
        64,
        3276.8 / 2,
        {"float32": 47.9 / 2, "bfloat16": 383 / 2, "float16": 383 / 2, "int8": 383 / 2},
        "none known",
        None,
        (_ACCELERATORS,),
        _HBM_CDNA,
        {"bfloat16": Figure(147.0, f"maximum achievable matmul FLOPS, one GCD: {_MAMF}")},
        mma=_MFMA,
        latency=_latency_as(_MI210_LATENCY, "MI210's (CDNA2, the same die)"),
    ),
)

#: Every named GPU, by name.
DEVICES: dict[str, DeviceSpec] = {d.name: d for d in _TABLE}
