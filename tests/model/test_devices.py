"""The table of named GPUs: complete, in the documented units and conventions, and checked
against figures of the vendors' datasheets."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from attnbench.errors import FieldError
from attnbench.model.devices import (
    DEVICES,
    PEAK_DTYPES,
    DeviceSpec,
    attention_flops_for,
    device_spec,
    flops_for,
)
from attnbench.model.dtypes import MODEL_DTYPES

REQUIRED = ("h100-sxm", "h100-pcie", "h200", "a100-80gb", "a100-40gb", "l40s", "l4", "mi300x")


def test_the_required_devices_are_there_by_their_own_names():
    assert set(REQUIRED) <= set(DEVICES)
    assert all(spec.name == name for name, spec in DEVICES.items())


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_every_field_is_filled_in_its_units(spec: DeviceSpec):
    for field in dataclasses.fields(spec):
        # no collectives: no peers; no expert tile: the instruction's is as small; no
        # warp-level share: mma.sync is the full-rate instruction, or not measured
        if field.name not in (
            "collectives",
            "interconnect_bandwidth",
            "expert_rows",
            "expert_source",
            "attention_flops",
            "attention_source",
            "warp_mma_source",
        ):
            assert getattr(spec, field.name) not in (None, "", ()), field.name
    if spec.expert_rows:
        assert spec.expert_rows < spec.mma_rows and "https://" in spec.expert_source
    if spec.attention_flops:  # FLOP/s, under the datasheet's bfloat16, with its source
        assert 1e13 <= spec.attention_flops <= spec.datasheet_flops["bfloat16"]
        assert "https://" in spec.attention_source
    assert isinstance(spec.memory_bytes, int) and spec.memory_bytes >= 10**10
    assert spec.memory_bandwidth >= 1e11  # bytes/s, not GB/s
    assert 0 < spec.launch_s < 1e-4  # seconds, not microseconds
    assert set(spec.dense_flops) <= set(PEAK_DTYPES)
    assert set(spec.dense_flops) == set(spec.datasheet_flops)
    assert {"float32", "bfloat16", "float16"} <= set(spec.dense_flops)
    assert all(value >= 1e13 for value in spec.dense_flops.values())  # FLOP/s, not TFLOPS
    assert spec.sources and all(url.startswith("https://") for url in spec.sources)
    for source in (spec.bandwidth_source, spec.flops_source, spec.launch_source, spec.mma_source):
        assert "https://" in source
    if spec.collectives is not None:
        assert spec.collectives.bus_bandwidth < spec.memory_bandwidth
        assert 1e-6 < spec.collectives.latency_s < 1e-3
        assert "https://" in spec.collectives.source


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_measured_figures_sit_under_the_datasheet_s(spec: DeviceSpec):
    """A microbenchmark reaches part of a peak (an MI300X's float8 GEMM the least: 44%),
    or a little past it on a card that boosts beyond the clock its datasheet counts at (an
    RTX 4090's torch.mm, 1.01 times its whitepaper's 165.2 TFLOPS at 2,520 MHz)."""
    assert 0.5 * spec.datasheet_bandwidth <= spec.memory_bandwidth <= spec.datasheet_bandwidth
    boost = 1.05 if spec.name == "rtx-4090" else 1
    for dtype, peak in spec.datasheet_flops.items():
        assert 0.4 * peak <= spec.dense_flops[dtype] <= boost * peak, dtype


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_tensor_cores_outrun_plain_float32(spec: DeviceSpec):
    peaks = spec.datasheet_flops
    assert peaks["bfloat16"] > peaks["float32"]
    assert peaks["bfloat16"] == peaks["float16"]
    # float8 doubles bfloat16, within the datasheets' rounding (L40S: 733 against 362.05).
    if "float8" in peaks:
        assert peaks["float8"] == pytest.approx(2 * peaks["bfloat16"], 0.02)


def test_dense_figures_not_the_ones_with_sparsity():
    assert DEVICES["h100-sxm"].datasheet_flops["bfloat16"] == 989.4e12
    assert DEVICES["l4"].datasheet_flops["float8"] == 242.5e12  # 485 with sparsity


def test_figures_of_the_datasheets():
    h100 = DEVICES["h100-sxm"]
    assert h100.memory_bytes == 80 * 10**9
    assert h100.datasheet_bandwidth == 3.35e12
    assert h100.interconnect_bandwidth == 450e9  # NVLink 4's 900 GB/s, per direction
    assert DEVICES["h200"].datasheet_bandwidth == 4.8e12
    assert DEVICES["h200"].datasheet_flops == h100.datasheet_flops
    assert DEVICES["a100-80gb"].datasheet_bandwidth == 2039e9
    assert DEVICES["a100-40gb"].datasheet_bandwidth == 1555e9
    assert DEVICES["a100-pcie-80gb"].datasheet_bandwidth == 1935e9
    assert "float8" not in DEVICES["a100-80gb"].dense_flops
    assert DEVICES["l40s"].datasheet_flops["bfloat16"] == 362.05e12
    assert DEVICES["l40s"].interconnect_bandwidth == 32e9  # PCIe Gen4 x16, per direction
    assert DEVICES["mi300x"].memory_bytes == 192 * 10**9
    assert DEVICES["mi300x"].interconnect_bandwidth == 448e9
    assert DEVICES["h100-nvl"].datasheet_flops["bfloat16"] == 835.5e12  # 1,671 sparse


def test_measured_figures_as_their_sources_state_them():
    h100 = DEVICES["h100-sxm"]
    assert h100.memory_bandwidth == 2970e9  # BabelStream triad
    assert flops_for(h100, "bfloat16") == 794.5e12  # maximum achievable matmul FLOPS
    assert flops_for(h100, "float8_e4m3fn") == 1402.6e12
    # a dtype not measured: the datasheet's times bfloat16's measured share
    assert flops_for(h100, "tfloat32") == pytest.approx(494.7e12 * 794.5 / 989.4)
    # NCCL's cost model for its low-latency ring over NVLink: 6.6 us + 0.6 us a step
    assert h100.collectives.latency(14) == pytest.approx(6.6e-6 + 14 * 0.6e-6)
    assert "tuning.cc" in h100.collectives.source
    assert h100.collectives.bus_bandwidth == 478.87e9  # nccl-tests, 8G messages
    # RCCL's: 12 us + 0.8 us a step over Infinity Fabric
    assert DEVICES["mi300x"].collectives.latency(14) == pytest.approx(12e-6 + 14 * 0.8e-6)
    # over PCIe, NCCL's step is slower
    assert DEVICES["l40s"].collectives.step_s > h100.collectives.step_s
    assert DEVICES["a100-80gb"].memory_bandwidth == 1700e9
    # a device not measured: the share its nearest measured sibling reaches
    assert DEVICES["h100-nvl"].memory_bandwidth == pytest.approx(3900e9 * 2970 / 3350)
    assert DEVICES["mi250x"].collectives is None  # no interconnect figure found


def test_the_b300_takes_its_datasheet_its_measured_gemm_and_the_gb300_s_memory():
    """The B300's datasheet figures (288 GB, 7.75 TB/s, float4 up from the B200's 9,000 to
    14,000 TFLOPS, int8 down to 153.5); its bfloat16 and float8 GEMMs measured (1,769.0 and
    3,353.3), its other dtypes at bfloat16's share; its memory at the share a GB300 (the
    same chip) reaches, 7,140 of 8,000 GB/s; the B200's NVLink 5 collectives."""
    b300, b200 = DEVICES["b300"], DEVICES["b200"]
    assert (b300.memory_bytes, b300.datasheet_bandwidth) == (288 * 10**9, 7.75e12)
    assert b300.memory_bandwidth == pytest.approx(7750e9 * 7140 / 8000)
    assert b300.datasheet_flops["float4"] == 14000e12 and b300.datasheet_flops["int8"] == 153.5e12
    assert flops_for(b300, "bfloat16") == pytest.approx(1769.0e12)
    assert flops_for(b300, "float8") == pytest.approx(3353.3e12)
    assert flops_for(b300, "float4") == pytest.approx(14000e12 * 1769.0 / 2250)
    assert b300.collectives.bus_bandwidth == b200.collectives.bus_bandwidth
    assert b300.collectives.source.startswith("not measured: as the B200's NVLink 5")
    assert (b300.mma_rows, b300.expert_rows) == (b200.mma_rows, b200.expert_rows)


def test_the_ada_cards_matmuls_and_the_rtx_4090_s_memory_as_measured():
    """The L40S's torch.mm run and the median of four RTX 4090 runs set their bfloat16 and
    float16 rates, their other dtypes at bfloat16's share of the datasheet; the RTX 4090's
    memory is a copy kernel's 921.85 GB/s."""
    l40s, rtx = DEVICES["l40s"], DEVICES["rtx-4090"]
    assert flops_for(l40s, "bfloat16") == pytest.approx(269.15e12)
    assert flops_for(l40s, "float8") == pytest.approx(733e12 * 269.15 / 362.05)
    assert flops_for(rtx, "bfloat16") == pytest.approx(
        statistics.median([170.06, 173.31, 162.39, 163.09]) * 1e12
    )
    assert flops_for(rtx, "float16") == pytest.approx(166.44e12)
    assert rtx.memory_bandwidth == pytest.approx(921.85e9)
    assert "torch.mm" in l40s.flops_source and "copy kernel" in rtx.bandwidth_source


def test_the_a10g_and_the_rtx_6000_ada_as_their_sources_give_them():
    """The A10G's rates are measured (half the A10 datasheet's tensor rates), its memory
    the A10's; the RTX 6000 Ada's dense rates are halves of its datasheet's one tensor
    figure, 1,457 TFLOPS in float8 with sparsity, as the L40S's are of its own."""
    a10g = DEVICES["a10g"]
    assert (a10g.memory_bytes, a10g.datasheet_bandwidth) == (24 * 10**9, 600e9)
    assert flops_for(a10g, "bfloat16") == 69.47e12 and flops_for(a10g, "float32") == 23.37e12
    assert flops_for(a10g, "int8") == pytest.approx(250e12 * 69.47 / 125)  # bfloat16's share
    assert a10g.memory_bandwidth == pytest.approx(600e9 * 663 / 696)  # an A40's share
    ada = DEVICES["rtx-6000-ada"]
    assert ada.datasheet_flops["float8"] == pytest.approx(728.5e12)
    assert ada.datasheet_flops["bfloat16"] == pytest.approx(364.25e12)
    assert ada.datasheet_bandwidth == 960e9 and ada.memory_bytes == 48 * 10**9
    assert (a10g.mma_rows, ada.mma_rows) == (16, 16)


def test_an_nccl_collective_takes_its_fastest_ring_protocol():
    """NCCL's cost model (tuning.cc) times each ring protocol by its own latency and share
    of the bandwidth and picks the fastest: LL for a decode step's few kilobytes, Simple
    (or LL128) for a prefill's megabytes, which LL's latency with Simple's bandwidth would
    make faster than any protocol is."""
    a100 = DEVICES["a100-80gb"].collectives
    busbw, steps = 231.58e9, 14  # an all-reduce over 8 ranks
    small, large = 7 / 4 * 16384, 7 / 4 * 2048 * 8192 * 2  # 8 ranks' busbw bytes

    def ring(base_us, step_us, bandwidth, bytes):
        return (base_us + steps * step_us) * 1e-6 + bytes / bandwidth

    ll = ring(6.6, 0.6, min(87.7e9, busbw / 4), small)
    assert a100.time_s(small, steps) == pytest.approx(ll)
    simple = ring(8.4, 3.4, busbw, large)
    ll128 = ring(14.0, 1.9, 0.92 * busbw, large)
    assert a100.time_s(large, steps) == pytest.approx(min(simple, ll128))
    assert a100.time_s(large, steps) > a100.latency(steps) + large / busbw
    # over PCIe NCCL enables no LL128: LL or Simple, at PCIe's step latencies
    l40s = DEVICES["l40s"].collectives
    assert [p.name for p in l40s.protocols] == ["LL", "Simple"]
    pcie = l40s.bus_bandwidth
    assert l40s.time_s(large, steps) == pytest.approx((8.4 + 14 * 5.7) * 1e-6 + large / pcie)
    assert "the fastest of LL 6.6 us + 0.6 us a step + bytes at 0.25x (at most 87.7 GB/s)" in (
        a100.describe()
    )
    # a cost model of one protocol: its latency and the bus bandwidth
    mi300x = DEVICES["mi300x"].collectives
    assert mi300x.time_s(large, steps) == mi300x.latency(steps) + large / mi300x.bus_bandwidth


def test_the_ridge_point_of_an_h100_in_bfloat16():
    h100 = DEVICES["h100-sxm"]
    assert h100.datasheet_flops["bfloat16"] / h100.datasheet_bandwidth == pytest.approx(295, abs=1)
    ridge = flops_for(h100, "bfloat16") / h100.memory_bandwidth
    assert ridge == pytest.approx(794.5 / 2.97, abs=1)


def test_float32_is_the_plain_peak_not_tf32():
    a100 = DEVICES["a100-80gb"]
    assert a100.datasheet_flops["float32"] == 19.5e12
    assert a100.datasheet_flops["tfloat32"] == 156e12
    assert flops_for(a100, "float32") < flops_for(a100, "tfloat32")


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_every_model_dtype_has_a_peak(spec: DeviceSpec):
    assert all(flops_for(spec, dtype) > 0 for dtype in MODEL_DTYPES)


def test_dtype_spellings_of_configs_and_both_float8_formats():
    h100 = DEVICES["h100-sxm"]
    assert flops_for(h100, "bf16") == flops_for(h100, "torch.bfloat16") == 794.5e12
    assert flops_for(h100, "float8_e5m2") == flops_for(h100, "float8_e4m3fn") == 1402.6e12


@pytest.mark.parametrize("name", ["h100-sxm", "H100-SXM", "H100-sxm"])
def test_lookup_ignores_case(name):
    assert device_spec(name) is DEVICES["h100-sxm"]


def test_an_unknown_device_names_the_value_and_the_devices():
    with pytest.raises(FieldError) as err:
        device_spec("h100")
    assert err.value.field == "gpu"
    message = str(err.value)
    assert message.startswith("gpu: h100: is not one of: h100-sxm, h100-pcie")
    assert all(name in message for name in DEVICES)


def test_a_dtype_without_a_peak_names_both():
    with pytest.raises(FieldError) as err:
        flops_for(DEVICES["a100-80gb"], "float8_e4m3fn")
    assert err.value.field == "dtype"
    assert "float8_e4m3fn" in str(err.value) and "a100-80gb" in str(err.value)
    with pytest.raises(FieldError, match="int4"):
        flops_for(DEVICES["h100-sxm"], "int4")


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_each_device_pads_matmuls_to_its_tensor_core_tile(spec: DeviceSpec):
    """Hopper's and Blackwell's full-rate instructions multiply 64 rows at a time (wgmma,
    tcgen05.mma), Ampere's, Ada's (mma.sync) and CDNA's (MFMA) 16."""
    blackwell = spec.name.startswith(("b200", "b300"))
    hopper = spec.name.startswith(("h100", "h200", "h800", "h20", "gh200"))
    generation = "64" if blackwell or hopper else "16"
    assert str(spec.mma_rows) == generation
    assert ("tcgen05" if blackwell else "wgmma" if generation == "64" else "") in spec.mma_source
    assert f"padded to multiples of {spec.mma_rows}" in spec.figures()


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_hoppers_run_the_warp_level_mma_sync_at_its_measured_share(spec: DeviceSpec):
    """mma.sync is Ampere's and Ada's full-rate instruction; a Hopper runs it at the share
    of wgmma an H100 SXM's microbenchmark measures, 668.332 of 901.924 TFLOPS. Blackwell's
    is not measured, and CDNA has no mma.sync: the matmul rate."""
    hopper = spec.mma_rows == 64 and "wgmma" in spec.mma_source
    assert spec.warp_mma_share == (668.332 / 901.924 if hopper else 1.0)
    said = "warp-level mma.sync (Marlin's) at 0.74 of the matmul rate" in spec.figures()
    assert said == hopper and ("mma_m16n8k16.log" in spec.warp_mma_source) == hopper
    # measured on the H100 SXM alone: the other Hoppers say they take its figure
    taken = spec.warp_mma_source.startswith("not measured: as the H100 SXM's")
    assert taken == (hopper and spec.name != "h100-sxm")
    with pytest.raises(ValueError, match="warp_mma_share"):
        dataclasses.replace(spec, warp_mma_share=0.0)


#: The pointer chases past every cache that were published in ns, by device: the run's
#: time over its loads at its largest buffer (a B300's cycles at its locked clock).
LATENCY_NS = {
    "l40": 4040.6e6 / 16148650,
    "a40": 3016.6e6 / 9428272,
    "gh200": 6786.4e6 / 19801884,
    "h100-pcie": 9177.7e6 / 24465205,
    "a100-80gb": 3688.7e6 / 9428272,
    "a100-40gb": 9970.5e6 / 24465205,
    "mi300x": 7434.8e6 / 17150357,
    "b300": 810 / 2.032,
    "mi210": 9570.5e6 / 24465205,  # not a named GPU: the MI250X's die
}
#: Each other card's: that of its chip, or of its memory and generation.
LATENCY_AS = {
    **dict.fromkeys(("h100-sxm", "h100-nvl", "h200", "h200-nvl", "h800", "h20"), "gh200"),
    **dict.fromkeys(("a800-80gb", "a100-pcie-80gb"), "a100-80gb"),
    "a100-pcie-40gb": "a100-40gb",
    "a10g": "a40",
    **dict.fromkeys(("l40s", "rtx-6000-ada", "l20", "l4", "rtx-4090"), "l40"),
    "b200": "b300",
    "mi325x": "mi300x",
    "mi250x": "mi210",
}


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_every_gpu_waits_a_measured_memory_latency_for_a_kernel_s_first_bytes(spec: DeviceSpec):
    """A pointer chase's load from memory past every cache: 250 ns (an L40's GDDR6) to 434
    (an MI300X's HBM3). A card with no run in ns takes the one of its chip or memory (the
    MI250X an MI210's, the same CDNA2 die), and says so."""
    measured = LATENCY_NS[LATENCY_AS.get(spec.name, spec.name)]
    assert spec.memory_latency_s * 1e9 == pytest.approx(measured)
    assert "pointer chase" in spec.memory_latency_source
    assert "https://" in spec.memory_latency_source
    taken = spec.memory_latency_source.startswith("not measured in ns: ")
    assert taken == (spec.name not in LATENCY_NS)
    ns = f"load latency {spec.memory_latency_s * 1e9:,.0f} ns from memory"
    assert ns in spec.figures()
    with pytest.raises(ValueError, match="memory_latency_s"):
        dataclasses.replace(spec, memory_latency_s=-1e-9)


def test_the_h800_h20_a800_and_gh200_as_their_sources_give_them():
    """The H800 is the H100 SXM with NVLink at 400 GB/s both ways (its all-reduce measured:
    215 GB/s); the H20 a Hopper of 148 dense bfloat16 TFLOPS (141.86 measured) on HBM3 at
    4.0 TB/s; the A800 the A100 SXM4 80GB with the same NVLink cut; the GH200's GPU the H100's
    rates on 96 GB of HBM3, with no peers here."""
    h100, h800 = DEVICES["h100-sxm"], DEVICES["h800"]
    assert h800.datasheet_flops == h100.datasheet_flops
    assert h800.memory_bandwidth == h100.memory_bandwidth
    assert flops_for(h800, "float8_e4m3fn") == flops_for(h100, "float8_e4m3fn")
    assert h800.interconnect_bandwidth == 200e9 and h800.collectives.bus_bandwidth == 215e9
    h20 = DEVICES["h20"]
    assert (h20.memory_bytes, h20.datasheet_bandwidth) == (96 * 10**9, 4000e9)
    assert h20.datasheet_flops["bfloat16"] == 148e12
    assert flops_for(h20, "bfloat16") == pytest.approx(141.86e12)
    assert flops_for(h20, "float8_e4m3fn") == pytest.approx(296e12 * 141.86 / 148)
    assert h20.memory_bandwidth == pytest.approx(4000e9 * 2970 / 3350)  # an H100's share
    assert (h20.mma_rows, h20.expert_rows) == (h100.mma_rows, h100.expert_rows)
    a800, a100 = DEVICES["a800-80gb"], DEVICES["a100-80gb"]
    assert a800.datasheet_flops == a100.datasheet_flops
    assert (
        flops_for(a800, "bfloat16") == pytest.approx(266.48e12) and "float8" not in a800.dense_flops
    )
    assert a800.collectives.bus_bandwidth == pytest.approx(a100.collectives.bus_bandwidth * 2 / 3)
    assert a800.collectives.source.startswith("protocols:") and "not measured" in (
        a800.collectives.source
    )
    gh200 = DEVICES["gh200"]
    assert gh200.collectives is None
    assert flops_for(gh200, "bfloat16") == pytest.approx(828.6e12)


def test_attention_kernels_run_at_their_measured_rate_at_most_the_matmul_s():
    """FlashAttention-2 on an A100 80GB PCIe: 217 TFLOPS, causal, 8,192 tokens (its siblings
    at the same share of 312); FlashAttention-4 on an H200: 675 (the H100 SXM's GH100 the
    same, the PCIe card at the share of its datasheet); FlashAttention-3 on an H20: 107.8.
    Where none was measured on the chip (Ada, Blackwell, CDNA), the matmul's rate."""
    assert attention_flops_for(DEVICES["a100-pcie-80gb"], "bfloat16") == 217e12
    assert attention_flops_for(DEVICES["a100-80gb"], "float16") == pytest.approx(217e12)
    assert attention_flops_for(DEVICES["h100-sxm"], "bfloat16") == 675e12
    assert attention_flops_for(DEVICES["h100-pcie"], "bfloat16") == pytest.approx(
        756e12 * 675 / 989.4
    )
    assert attention_flops_for(DEVICES["h20"], "bfloat16") == pytest.approx(107.8e12)
    for name in ("l40s", "b200", "mi300x"):
        spec = DEVICES[name]
        assert attention_flops_for(spec, "bfloat16") == flops_for(spec, "bfloat16")
    # float32 attention (a CPU's, a run's) keeps the matmul rate
    h100 = DEVICES["h100-sxm"]
    assert attention_flops_for(h100, "float32") == flops_for(h100, "float32")
    assert "attention TFLOPS 675 in 16 bits" in h100.figures()


def test_the_l4_a40_and_l20_take_their_measured_gemms():
    """A PyTorch matmul sweep's runs on each card: the L4's 70.89 TFLOPS in bfloat16 (of its
    datasheet's 121, at 72 W), the A40's 122.29 (of 149.7) and the L20's 114.14 (of 119.5);
    their bandwidth the A40's triad, or the L40's share of its datasheet for the Ada cards."""
    l4, a40, l20 = DEVICES["l4"], DEVICES["a40"], DEVICES["l20"]
    assert flops_for(l4, "bfloat16") == pytest.approx(70.89e12)
    assert flops_for(l4, "float8_e4m3fn") == pytest.approx(242.5e12 * 70.89 / 121)
    assert (
        flops_for(a40, "bfloat16") == pytest.approx(122.29e12) and "float8" not in a40.dense_flops
    )
    assert a40.memory_bandwidth == 663e9 and a40.datasheet_bandwidth == 696e9
    assert l20.datasheet_flops["float8"] == 2 * l20.datasheet_flops["bfloat16"] == 239e12
    assert flops_for(l20, "bfloat16") == pytest.approx(114.14e12)
    assert l20.memory_bandwidth == pytest.approx(864e9 * 803 / 864)
    assert (l4.mma_rows, a40.mma_rows, l20.mma_rows) == (16, 16, 16)


@pytest.mark.parametrize("spec", DEVICES.values(), ids=list(DEVICES))
def test_an_attention_rate_not_measured_on_the_card_is_its_chip_s_share(spec: DeviceSpec):
    """A card whose attention kernel was not measured takes the share of its datasheet's
    bfloat16 that its chip's measured card reaches: an H200's 675 of 989.4 for the
    Hoppers, an A100 80GB PCIe's 217 of 312 for the A100s and the A800."""
    if not spec.attention_source.startswith("not measured"):
        return
    share = 675 / 989.4 if spec.mma_rows == 64 else 217 / 312
    assert spec.attention_flops == pytest.approx(spec.datasheet_flops["bfloat16"] * share)
