"""How predict's table reads: one number format down a column, and the model's prefill of
a batch of several prompts named as such, not as a request's time to first token."""

from __future__ import annotations

import json

from attnbench.cli import app
from attnbench.render.columns import aligned_columns, decimals_for
from attnbench.render.predict import (
    BATCH_PREFILL,
    PHASE_COLUMNS,
    REQUEST_TTFT,
    References,
    batch_prefill_note,
    device_sources,
    gpu_name,
    phase_rows,
    source_notes,
)
from tests.helpers import runner


def test_decimals_give_the_smallest_number_three_digits_at_most_three_decimals():
    assert decimals_for([21.23, 0.2305, 2857.0]) == 3
    assert decimals_for([2823.0, 7.768, 16.91]) == 2
    assert decimals_for([2857.0, 1234.5]) == 0
    assert decimals_for([0.00012, 3.0]) == 3  # capped
    assert decimals_for([None, 0.0]) == 0  # nothing to size it by


def predicted(tmp_path, *batches: int) -> list[dict]:
    out = tmp_path / "p.json"
    args = ["predict", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--seq-len", "4096"]
    result = runner.invoke(app, [*args, "--batch", ",".join(map(str, batches)), "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["records"]


def test_a_column_reads_in_one_format(tmp_path):
    rows = phase_rows(predicted(tmp_path, 1, 32))
    columns = {c.field: c for c in aligned_columns(PHASE_COLUMNS, rows)}
    for field in ("time_ms", "intensity"):
        known = [r for r in rows if r[field] is not None]  # a request TTFT row has no counts
        cells = [columns[field].text(r) for r in known]
        decimals = {len(c.partition(".")[2]) for c in cells}
        assert len(decimals) == 1, cells  # 0.231, 21.232 and 2,857.188; not 0.2305 and 2,857
        places = decimals.pop()
        for cell, row in zip(cells, known, strict=True):
            assert float(cell.replace(",", "")) == round(row[field], places)


def test_the_prefill_of_a_batch_is_not_called_a_requests_ttft(tmp_path):
    records = predicted(tmp_path, 1, 32)
    steps = {(r["batch"], r["step"]) for r in phase_rows(records)}
    assert (1, "model TTFT") in steps and (32, BATCH_PREFILL) in steps
    assert (32, "model TTFT") not in steps
    (note,) = batch_prefill_note(records)
    assert note.startswith(f"{BATCH_PREFILL}: the prefill of all the batch's prompts (batch 32)")
    assert batch_prefill_note([r for r in records if r["batch"] == 1]) == []


def test_a_requests_time_to_first_token_is_its_own_prompt_prefilled_alone(tmp_path):
    one, many = predicted(tmp_path, 1, 32)
    # a request alone: the prefill of one prompt, whatever the batch it decodes in
    assert many["request_ttft_ms"] == one["request_ttft_ms"] == one["ttft_ms"]
    assert many["ttft_ms"] > 20 * many["request_ttft_ms"]
    rows = [(r["batch"], r["step"], r["time_ms"]) for r in phase_rows([one, many])]
    assert (32, REQUEST_TTFT, many["request_ttft_ms"]) in rows
    assert not [r for r in rows if r[0] == 1 and r[1] == REQUEST_TTFT]  # the model TTFT row


def test_dequantising_weight_only_weights_is_stated(tmp_path):
    out = tmp_path / "q.json"
    args = ["predict", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--seq-len", "512"]
    result = runner.invoke(app, [*args, "--weights-dtype", "int4,float16", "--json", str(out)])
    assert result.exit_code == 0, result.output
    int4, full = json.loads(out.read_text())["records"]
    assert int4["dequant_ms"] > 0 and full["dequant_ms"] is None
    (line,) = [x for x in source_notes([int4, full]) if "dequantising" in x]
    assert f"{int4['dequant_ms']:.3g} ms of each decode step" in line


def test_this_machine_is_named_so_with_its_probes_as_its_only_source(tmp_path):
    out = tmp_path / "p.json"
    args = ["predict", "--model", "llama-2-7b", "--seq-len", "64", "--json", str(out), "-q"]
    assert runner.invoke(app, args).exit_code == 0
    records = json.loads(out.read_text())["records"]
    references = References()
    ((device, figures),) = device_sources(records, references)
    assert device.startswith("this machine (") and "matmul TFLOPS float16 0." in figures[1]
    assert not any("datasheets" in line for line in figures)  # it has none: its probes
    assert references.lines() == []  # its probes cite nothing
    assert gpu_name("this") == "this machine" and gpu_name("h100-sxm") == "h100-sxm"


def test_mma_syncs_surcharge_on_a_hopper_is_named_among_the_parts_of_a_step(tmp_path):
    """Marlin's weight-only kernel on an H100 runs on mma.sync, slower than wgmma: the time
    beyond the matmul rate is a part of the step, named; on an A100 it has none."""
    out = tmp_path / "p.json"
    args = ["predict", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--seq-len", "64"]
    args += ["--weights-dtype", "int4", "--weight-only-kernel", "tensor-cores"]
    assert runner.invoke(app, [*args, "--json", str(out), "-q"]).exit_code == 0
    (record,) = json.loads(out.read_text())["records"]
    assert 0 < record["warp_mma_ms"] < record["padding_ms"] < record["tpot_ms"]
    notes = source_notes([record])
    assert any("warp-level mma.sync" in line for line in notes)
    assert any("tile padding + mma.sync's surcharge + overhead" in line for line in notes)
    args[4] = "a100-80gb"
    assert runner.invoke(app, [*args, "--json", str(out), "-q"]).exit_code == 0
    (ampere,) = json.loads(out.read_text())["records"]
    assert ampere["warp_mma_ms"] is None and ampere["padding_ms"] > 0
    assert not any("surcharge" in line for line in source_notes([ampere]))


def test_a_tp_sweep_names_each_degrees_parts_of_a_step(tmp_path):
    """The parts of a step a note gives (dequantisation, tiles, mma.sync) differ with the
    tensor-parallel degree: each degree's line is there, named."""
    out = tmp_path / "p.json"
    args = ["predict", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--seq-len", "64"]
    args += ["--weights-dtype", "int4", "--weight-only-kernel", "tensor-cores", "--tp", "1,2"]
    assert runner.invoke(app, [*args, "--json", str(out), "-q"]).exit_code == 0
    records = json.loads(out.read_text())["records"]
    notes = source_notes(records)
    for part in ("dequantising", "compute as zeros", "warp-level mma.sync"):
        lines = [line for line in notes if part in line]
        assert len(lines) == 2 and sum("h100-sxm, tp 2:" in line for line in lines) == 1


def test_the_tiles_padding_is_named_among_the_parts_of_a_step(tmp_path):
    """A decode step of one sequence on Hopper fills 64-row tiles: 63 rows of zeros a
    matmul, a part of the step named beside the launches and the collectives."""
    out = tmp_path / "p.json"
    args = ["predict", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--seq-len", "64"]
    assert runner.invoke(app, [*args, "--json", str(out), "-q"]).exit_code == 0
    (record,) = json.loads(out.read_text())["records"]
    assert 0 < record["padding_ms"] < record["tpot_ms"]
    assert any("compute as zeros" in line for line in source_notes([record]))
    args[4] = "a100-80gb"  # 16-row tiles: padding too, less of it
    assert runner.invoke(app, [*args, "--json", str(out), "-q"]).exit_code == 0
    (ampere,) = json.loads(out.read_text())["records"]
    assert 0 < ampere["padding_ms"] < record["padding_ms"]
