"""Rules about a planned study as a whole."""

from __future__ import annotations

import pytest

from attnbench.errors import FieldError
from attnbench.study.plan import check_one_rank_per_point, plan_study

DECODE = """\
decode:
  d_model: 64
  num_heads: 4
  num_kv_heads: 4
  tp: {tp}
  prompt_len: 16
  gen_len: 4
"""


def command(tp: int) -> str:
    return f"time-it {tp}"


def planned(tmp_path, tp: str) -> tuple:
    path = tmp_path / "study.yaml"
    path.write_text(DECODE.format(tp=tp))
    return plan_study(path, "cpu"), str(path)


def test_a_study_of_points_on_one_rank_each_passes(tmp_path):
    plan, source = planned(tmp_path, "1")
    assert check_one_rank_per_point(plan, source, command) is None


def test_a_tensor_parallel_decode_point_is_refused_at_its_field(tmp_path):
    plan, source = planned(tmp_path, "4")
    with pytest.raises(FieldError) as caught:
        check_one_rank_per_point(plan, None, command)
    error = caught.value
    assert (error.field, error.value, error.location) == ("tp", 4, None)
    assert error.reason == (
        "a study runs each decode point on one rank; time a layer split over 4 ranks with time-it 4"
    )
    with pytest.raises(FieldError) as caught:
        check_one_rank_per_point(plan, source, command)
    assert str(caught.value) == f"decode.tp: 4 ({source}): {error.reason}"
