"""Weights' formats: packed values and their scales' bytes by hand, the dtype the matmuls
run in, and the refusals."""

from __future__ import annotations

import pytest

from attnbench.errors import FieldError
from attnbench.model.weights import WeightFormat


def test_sixteen_bit_weights_are_their_values():
    assert WeightFormat("bfloat16").bytes(1000, 100) == 2000
    assert not WeightFormat("float32").quantized


def test_int4_keeps_a_scale_and_a_zero_point_per_group():
    # 2 rows of 4,096 weights: 4,096 bytes of values; groups of 128, 32 a row, 2 + 2 bytes each
    assert WeightFormat("int4").bytes(2 * 4096, 4096) == 4096 + 2 * 32 * 4
    assert WeightFormat("int4", 32).bytes(2 * 4096, 4096) == 4096 + 2 * 128 * 4
    # groups of 1,000 cover a row of 4,096 in 5, the last one short: none spans two rows
    assert WeightFormat("int4", 1000).bytes(2 * 4096, 4096) == 4096 + 2 * 5 * 4
    # a row shorter than the default group is one group
    assert WeightFormat("int4").bytes(4 * 64, 64) == 128 + 4 * 1 * 4


def test_int8_and_float8_keep_a_scale_per_row_by_default():
    assert WeightFormat("int8").bytes(4096 * 10, 4096) == 4096 * 10 + 10 * 2
    assert WeightFormat("float8_e4m3fn", 64).bytes(4096, 4096) == 4096 + 64 * 2


def test_a_scale_group_longer_than_a_row_is_refused():
    """A group lies within one row: a group of more inputs than a row has would count
    fewer scales than one per row."""
    assert WeightFormat("int8", 4096).bytes(4096 * 3, 4096) == 4096 * 3 + 3 * 2
    with pytest.raises(FieldError, match="exceeds the 4096 inputs of a weight row") as error:
        WeightFormat("int8", 16384).bytes(4096 * 3, 4096)
    assert (error.value.field, error.value.value) == ("weights_group", 16384)


def test_the_matmuls_run_in_the_activations_dtype_but_for_float8():
    assert WeightFormat("int4").matmul_dtype("bfloat16") == "bfloat16"
    assert WeightFormat("int8").matmul_dtype("float16") == "float16"
    assert WeightFormat("float8_e5m2").matmul_dtype("bfloat16") == "float8_e5m2"


def test_four_bit_floats_keep_an_8_bit_scale_per_block_their_format_fixes():
    # 2 rows of 4,096: 4,096 bytes of values; mxfp4 a byte per 32 inputs, nvfp4 per 16
    assert WeightFormat("mxfp4").bytes(2 * 4096, 4096) == 4096 + 2 * 128
    assert WeightFormat("nvfp4").bytes(2 * 4096, 4096) == 4096 + 2 * 256
    assert WeightFormat("mxfp4", 32).bytes(2 * 4096, 4096) == 4096 + 2 * 128
    with pytest.raises(FieldError, match="mxfp4 scales blocks of 32 inputs") as error:
        WeightFormat("mxfp4", 128)
    assert (error.value.field, error.value.value) == ("weights_group", 128)
    assert WeightFormat("nvfp4").describe() == "nvfp4 in blocks of 16"
    # a row shorter than the block is one block (as int4's default group is at most a row)
    assert WeightFormat("mxfp4").bytes(4 * 16, 16) == 32 + 4
    assert WeightFormat.of("mxfp4", 64) == WeightFormat("mxfp4")  # a sweep's group is int4's


def test_mxfp4_is_weight_only_and_nvfp4_runs_at_the_float4_peak():
    mxfp4, nvfp4 = WeightFormat("mxfp4"), WeightFormat("nvfp4")
    assert (mxfp4.matmul_dtype("bfloat16"), mxfp4.dequant_ops) == ("bfloat16", 4)
    assert mxfp4.activation_quant_bytes("bfloat16") == 0
    assert (nvfp4.matmul_dtype("bfloat16"), nvfp4.dequant_ops) == ("float4", 0)
    # a bfloat16 input read, written in 4 bits with a byte of scale per 16
    assert nvfp4.activation_quant_bytes("bfloat16") == 2 + 0.5 + 1 / 16


def test_a_sweep_s_group_goes_to_its_quantised_weights_only():
    assert WeightFormat.of("bfloat16", 32) == WeightFormat("bfloat16")
    assert WeightFormat.of("int4", 32) == WeightFormat("int4", 32)
    assert WeightFormat.of("int4", 32).describe() == "int4 in groups of 32"
    assert WeightFormat("int8").describe() == "int8 per channel"


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: WeightFormat("int3"), "weights_dtype"),
        (lambda: WeightFormat("int4", 0), "weights_group"),
        (lambda: WeightFormat("bfloat16", 32), "weights_group"),
    ],
)
def test_a_bad_format_names_its_field(make, field):
    with pytest.raises(FieldError) as error:
        make()
    assert error.value.field == field
