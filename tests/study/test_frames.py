"""load_frames: a study's results.json, its directory and a command's --json as pandas
DataFrames, one per section, with the columns of the CSVs and the declared kinds."""

from __future__ import annotations

import sys

import pytest

from attnbench import load_frames
from attnbench.cli import app
from attnbench.errors import UsageError
from attnbench.records import csv_fields, field_kinds
from attnbench.study.runner import DirectoryStore, plan_study, run_study
from attnbench.study.sections import record_type
from tests.helpers import runner

pd = pytest.importorskip("pandas")

TINY = """\
defaults:
  d_model: 64
  num_heads: 4
sweep:
  num_kv_heads: [4, 1]
params: {}
kvmem:
  num_layers: 2
  batch: 1
  seq_len: [16, 64]
  device: cpu
decode:
  batch: 1
  dtype: float32
  prompt_len: 4
  gen_len: 2
  warmup: 0
  repeats: 2
  device: cpu
"""
SECTIONS = {"params": 2, "kvmem": 4, "decode": 4}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The directory of a tiny study of every kind of section but fit, run on the CPU."""
    folder = tmp_path_factory.mktemp("frames")
    config = folder / "study.yaml"
    config.write_text(TINY)
    out = folder / "study"
    run_study(
        plan_study(config),
        DirectoryStore(out),
        probe_peak=lambda device: 10.0,
        probe_flops=lambda device, dtype: 0.1,
    )
    return out


def test_each_section_is_a_frame_with_the_columns_and_rows_of_its_csv(study):
    frames = load_frames(study / "results.json")
    assert {name: len(frame) for name, frame in frames.items()} == SECTIONS
    for name, frame in frames.items():
        written = pd.read_csv(study / f"{name}.csv")
        assert list(frame.columns) == list(written.columns), name
        keys = [c for c, kind in frame.attrs["kinds"].items() if kind == "key"]
        assert frame[keys].astype(str).values.tolist() == written[keys].astype(str).values.tolist()
    kvmem = frames["kvmem"]
    assert kvmem["seq_len"].tolist() == [16, 64, 16, 64]
    assert kvmem["kv_bytes"].tolist() == pd.read_csv(study / "kvmem.csv")["kv_bytes"].tolist()


def test_kinds_are_the_declared_kinds_of_the_columns(study):
    for name, frame in load_frames(study).items():
        declared = field_kinds(record_type(name))
        assert frame.attrs["kinds"] == {c: declared[c].value for c in csv_fields(record_type(name))}
    frames = load_frames(study)
    assert frames["kvmem"].attrs["kinds"]["seq_len"] == "key"
    assert frames["kvmem"].attrs["kinds"]["kv_bytes"] == "exact"
    assert frames["kvmem"].attrs["kinds"]["measured_bytes"] == "memory"
    assert frames["decode"].attrs["kinds"]["step_ms_median"] == "timing"
    assert frames["decode"].attrs["kinds"]["tokens_per_s"] == "info"


def test_a_directory_loads_as_its_results_json(study):
    by_folder, by_file = load_frames(study), load_frames(study / "results.json")
    assert by_folder.keys() == by_file.keys()
    for name in by_file:
        pd.testing.assert_frame_equal(by_folder[name], by_file[name])


def test_raw_samples_are_list_columns_only_when_asked(study):
    assert "samples_ms" not in load_frames(study)["decode"].columns
    decode = load_frames(study, samples=True)["decode"]
    fields = list(field_kinds(record_type("decode")))
    assert list(decode.columns) == fields
    assert decode.attrs["kinds"]["samples_ms"] == "timing"
    for samples in decode["samples_ms"]:
        assert isinstance(samples, list) and len(samples) == 2
        assert all(s > 0 for s in samples)


def test_a_command_json_loads_with_its_model_parts(tmp_path):
    out = tmp_path / "params.json"
    result = runner.invoke(app, ["params", "--model", "llama-3-8b", "-q", "--json", str(out)])
    assert result.exit_code == 0, result.output
    frames = load_frames(out)
    assert set(frames) == {"params", "model_parts"}
    for name, frame in frames.items():
        assert list(frame.columns) == csv_fields(record_type(name))
        assert len(frame) > 0


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("notes.txt", "not json\n", "not valid JSON"),
        ("other.json", '{"rows": []}', "schema_version"),
        ("empty", None, "results.json: no such file"),
    ],
)
def test_a_file_attnbench_did_not_write_is_one_line(tmp_path, name, text, problem):
    path = tmp_path / name
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_frames(path)
    message = str(caught.value)
    assert problem in message and "\n" not in message


def test_without_pandas_it_says_how_to_install_it(study, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'attnbench\[pandas\]'"):
        load_frames(study)
