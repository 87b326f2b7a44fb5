"""Output files and result files: every output checked before any work, records kept when
a write fails after it, atomic JSON that never replaces what is not a regular file, one
validator for every result file read back, one `run` per results directory, and Ctrl-C
at any moment of a run."""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import attnbench.cli.common
import attnbench.cli.decode_cmd
import attnbench.cli.run_cmd
import attnbench.study.output
from attnbench.cli import app
from attnbench.errors import FieldError, UsageError
from attnbench.experiments.params import ParamsRecord
from attnbench.gate.compare import Thresholds, Verdict, judge_timing
from attnbench.measure.stats import Measurement, Summary
from attnbench.render import plots, report
from attnbench.study.documents import MAX_RESULTS_BYTES, load_document
from attnbench.study.output import write_json_atomic
from attnbench.study.runner import RESULTS_FILE, DirectoryStore, plan_study, run_study
from attnbench.study.stores import LOCK_FILE
from tests.helpers import SMALL_CONFIG, one_error, runner
from tests.model.test_files import in_thread, memory_guard, sparse_file

PARAMS_STUDY = "defaults: {d_model: 64, num_heads: 4}\nparams: {num_kv_heads: [4, 2, 1]}\n"
KVMEM_ARGS = ["kvmem", "--d-model", "64", "--heads", "4", "--kv-heads", "4,2,1", "--no-measure"]


def enospc() -> OSError:
    """What a write on a full disk raises: it names no file."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "250"})


@pytest.fixture
def study(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(PARAMS_STUDY)
    return path


@pytest.fixture
def nothing_runs(monkeypatch):
    def forbidden(*args, **kwargs):
        pytest.fail("the command ran before checking its outputs")

    monkeypatch.setattr("attnbench.study.runner.run_study", forbidden)
    monkeypatch.setattr("attnbench.study.runner.run_study", forbidden)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The system temporary folder, for this test: where kept records go."""
    folder = tmp_path / "systmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


# ------------------------------------------------------------------ 1. outputs checked first


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize(
    ("command", "outputs", "message"),
    [
        (
            "params",
            ["--csv", "s.yaml"],
            "--csv s.yaml: is the --config file, an input of this command",
        ),
        (
            "params",
            ["--json", "s.yaml"],
            "--json s.yaml: is the --config file, an input of this command",
        ),
        (
            "params",
            ["--csv", "o.json", "--json", "./o.json"],
            "--json ./o.json: is also the --csv output; give each output its own file",
        ),
        (
            "decode-speed",
            ["--json", "link.yaml"],
            "--json link.yaml: is the --config file, an input of this command",
        ),
        ("params", ["--csv", "folder"], "--csv folder: is a directory, not a file to write"),
        ("params", ["--csv", "/dev/full"], "--csv /dev/full: not a regular file"),
        (
            "params",
            ["--json", "/proc/foo/x.json"],
            "--json /proc/foo/x.json: cannot write in /proc: not a writable directory",
        ),
        ("kvmem", ["--json", "ro.json"], "--json ro.json: the file is read-only"),
        ("kvmem", ["--csv", "locked/x.csv"], "cannot write in "),
    ],
    ids=[
        "csv-is-config",
        "json-is-config",
        "csv-is-json",
        "decode-json-is-config-by-link",
        "directory",
        "device",
        "proc",
        "read-only-file",
        "read-only-folder",
    ],
)
def test_outputs_are_checked_before_any_work(study, monkeypatch, command, outputs, message):
    monkeypatch.chdir(study.parent)
    if outputs[-1].startswith("/") and not Path(outputs[-1]).parent.parent.exists():
        pytest.skip(f"no {outputs[-1]} here")
    (study.parent / "folder").mkdir()
    (study.parent / "link.yaml").symlink_to(study)
    read_only = study.parent / "ro.json"
    read_only.write_text("{}")
    read_only.chmod(0o444)
    (study.parent / "locked").mkdir(mode=0o555)
    before = study.read_bytes()
    line = one_error(cli(command, "--config", "s.yaml", *outputs))
    assert message in line
    assert study.read_bytes() == before and read_only.read_text() == "{}"
    assert not (study.parent / "o.json").exists()


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["params", "--hf-config", "o.model_parts.csv", "--csv", "o.csv"],
            "--csv o.csv: writes o.model_parts.csv beside it, which is the --hf-config file, "
            "an input of this command",
        ),
        (
            ["params", "--model", "llama-2-7b", "--csv", "o.csv", "--json", "o.model_parts.csv"],
            "writes o.model_parts.csv beside it, which is also the --json output",
        ),
        (
            ["kvmem", "--model", "llama-3-8b", "--csv", "o.csv", "--no-measure"],
            "writes o.layer_kinds.csv beside it, which is a directory, not a file to write",
        ),
    ],
    ids=["input", "json", "directory"],
)
def test_the_csvs_written_beside_the_csv_are_checked_before_any_work(
    tmp_path, monkeypatch, args, message
):
    """A command that writes record sets beside its CSV (params: a model's parts, kvmem:
    its layer kinds) checks those files as it checks --csv itself: none may be an input,
    another output or unwritable, and nothing is written when one is."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "o.model_parts.csv"
    config.write_text(json.dumps(SMALL_CONFIG | {"model_type": "llama"}))
    (tmp_path / "o.layer_kinds.csv").mkdir()
    line = one_error(cli(*args))
    assert message in line
    assert json.loads(config.read_text())["hidden_size"] == 64
    assert not (tmp_path / "o.csv").exists()


def test_an_output_file_the_process_cannot_write_is_refused(tmp_path, monkeypatch):
    """os.access decides for a user that is not root (root passes it on any file)."""
    path = tmp_path / "o.json"
    path.write_text("{}")
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != path)
    with pytest.raises(UsageError, match="the file is read-only"):
        attnbench.cli.common.check_writable({"json": str(path)}, {})
    folder_path = tmp_path / "sub" / "x.json"
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != tmp_path)
    with pytest.raises(UsageError, match=f"cannot write in {tmp_path}"):
        attnbench.cli.common.check_writable({"json": str(folder_path)}, {})


# ------------------------------------------------------------------ 2. a write that fails


def test_a_full_disk_keeps_the_records_and_names_the_file(tmp_path, monkeypatch, private_tmp):
    def full(*args, **kwargs):
        raise enospc()

    monkeypatch.setattr(attnbench.study.output, "replace_with_json", full)
    out = tmp_path / "k.json"
    line = one_error(cli(*KVMEM_ARGS, "--json", out, "-q"))
    assert line.startswith(
        f"error: --json {out}: cannot write: No space left on device; the records are kept in "
    )
    (kept,) = private_tmp.glob("attnbench-kvmem-*.json")
    assert line.endswith(str(kept.resolve()))
    doc = load_document(kept)
    assert doc.command == "kvmem" and len(doc.sections["kvmem"]) == 3
    assert not out.exists()


def test_a_folder_gone_after_the_check_keeps_the_records(tmp_path, private_tmp):
    gone = tmp_path / "gone"
    csv_path = gone / "p.csv"
    attnbench.cli.common.check_writable({"csv": str(csv_path)}, {})
    gone.write_text("a file where the folder was")
    records = [
        ParamsRecord(
            variant="MHA",
            d_model=64,
            num_heads=4,
            num_kv_heads=4,
            head_dim=16,
            bias=False,
            q_params=4096,
            k_params=4096,
            v_params=4096,
            o_params=4096,
            total_params=16384,
            module_params=16384,
            ratio_vs_mha=1.0,
        )
    ]
    with pytest.raises(FieldError) as caught:
        written = attnbench.study.output.write_outputs(
            "params", records, ParamsRecord, {}, {"device": "cpu"}, str(csv_path), None
        )
        attnbench.cli.common.show_written(written, quiet=True)
    assert caught.value.field == "csv" and "cannot write: " in caught.value.reason
    (kept,) = private_tmp.glob("attnbench-params-*.json")
    assert f"the records are kept in {kept.resolve()}" in caught.value.reason
    assert json.loads(kept.read_text())["records"][0]["total_params"] == 16384


def test_run_on_a_full_disk_names_the_file_and_keeps_the_records(
    study, tmp_path, monkeypatch, private_tmp
):
    real = attnbench.study.output.replace_with_json
    saves = []

    def fills_up(target, document):
        saves.append(target)
        if len(saves) > 2:  # the new document and the first point fit; the second does not
            raise enospc()
        real(target, document)

    monkeypatch.setattr(attnbench.study.output, "replace_with_json", fills_up)
    out = tmp_path / "study"
    line = one_error(cli("run", study, "--out", out, "-q"))
    assert "None" not in line
    assert line.startswith(
        f"error: --out {out / RESULTS_FILE}: cannot write: No space left on "
        "device; the records are kept in "
    )
    (kept,) = private_tmp.glob("attnbench-run-*.json")
    assert len(json.loads(kept.read_text())["sections"]["params"]["records"]) == 2
    assert len(load_document(out / RESULTS_FILE).sections["params"]) == 1
    assert not (out / LOCK_FILE).exists()


# ------------------------------------------------------------------ 3. atomic replace


def test_atomic_json_keeps_the_mode_and_writes_through_a_symlink(tmp_path):
    path = tmp_path / "o.json"
    path.write_text("old")
    path.chmod(0o640)
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    link = tmp_path / "link.json"
    link.symlink_to(path)
    write_json_atomic(link, {"a": 2})
    assert link.is_symlink() and json.loads(path.read_text()) == {"a": 2}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "o.json"]


def test_atomic_json_never_replaces_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    device = tmp_path / "null.json"
    device.symlink_to(os.devnull)
    read_only = tmp_path / "ro.json"
    read_only.write_text("keep")
    read_only.chmod(0o444)
    special = "not a regular file (a device, a FIFO or a socket); give a file to write"
    for path, reason in (
        (fifo, special),
        (device, special),
        (tmp_path, "is a directory, not a file to write"),
        (read_only, "the file is read-only"),
    ):
        with pytest.raises(OSError) as caught:
            write_json_atomic(path, {"a": 1})
        assert caught.value.strerror == reason and caught.value.filename == str(path)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert device.is_symlink() and stat.S_ISCHR(Path(os.devnull).stat().st_mode)
    assert read_only.read_text() == "keep"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="no /proc/self/fd here")
def test_a_pipe_behind_a_magic_link_is_refused_as_not_a_regular_file():
    """/dev/stdout into a pipe: /proc's link names a pipe, which realpath cannot find."""
    read, write = os.pipe()
    try:
        path = f"/proc/self/fd/{write}"
        assert not os.path.exists(os.path.realpath(path))
        with pytest.raises(OSError) as caught:
            write_json_atomic(path, {"a": 1})
        assert caught.value.strerror.startswith("not a regular file")
        assert caught.value.filename == path
    finally:
        os.close(read)
        os.close(write)


# ------------------------------------------------------------------ 4-7. result files


@pytest.fixture(scope="module")
def kvmem_doc(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("kvmem") / "k.json"
    result = runner.invoke(app, [*KVMEM_ARGS, "--json", str(path), "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(path.read_text())


def _write(path: Path, doc) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, allow_nan=True))
    return path


def _set(field: str, value):
    def edit(doc):
        doc["records"][1][field] = value

    return edit


def _duplicate(doc):
    """Record 1 again, with another value: which of the two would compare match?"""
    doc["records"].append({**doc["records"][1], "kv_bytes": doc["records"][1]["kv_bytes"] + 2})


def _drop_key(doc):
    del doc["records"][1]["num_kv_heads"]


def _no_environment(doc):
    doc["environment"] = None


BAD_RESULTS = [
    (_set("kv_bytes", math.nan), "k.json: kvmem record 1: kv_bytes: nan is not a finite number"),
    ("1e400", "k.json: kvmem record 1: kv_bytes: inf is not a finite number"),
    (_set("kv_bytes", -4096), "k.json: kvmem record 1: kv_bytes: -4096 is negative"),
    (_set("measured_bytes", -1.5), "kvmem record 1: measured_bytes: -1.5 is negative"),
    (_set("bytes_per_token", 10**400), "kvmem record 1: bytes_per_token: 1000000"),
    (_set("ratio_vs_mha", "half"), "kvmem record 1: ratio_vs_mha: expected a number or null"),
    (_set("num_kv_heads", "2"), "kvmem record 1: num_kv_heads: expected an integer or null"),
    (_duplicate, "kvmem record 3: a duplicate row: record 1 has the same key fields ("),
    (_drop_key, "kvmem record 1: key field num_kv_heads is missing"),
    (_no_environment, "k.json: environment: expected an object"),
]
BAD_IDS = [
    "nan",
    "1e400",
    "negative-exact",
    "negative-memory",
    "huge-int",
    "info-type",
    "key-type",
    "duplicate",
    "missing-key",
    "null-environment",
]


def _bad_copy(doc: dict, tmp_path: Path, edit) -> Path:
    if isinstance(edit, str):  # JSON text that Python's json reads as an infinity
        text = json.dumps(doc).replace(
            f'"kv_bytes": {doc["records"][1]["kv_bytes"]}', f'"kv_bytes": {edit}', 1
        )
        assert edit in text
        return _write(tmp_path / "k.json", text)
    bad = copy.deepcopy(doc)
    edit(bad)
    return _write(tmp_path / "k.json", bad)


@pytest.mark.parametrize(("edit", "message"), BAD_RESULTS, ids=BAD_IDS)
def test_compare_rejects_bad_result_files_naming_the_field(kvmem_doc, tmp_path, edit, message):
    base = _write(tmp_path / "base.json", kvmem_doc)
    bad = _bad_copy(kvmem_doc, tmp_path, edit)
    for args in ((base, bad), (bad, base)):
        line = one_error(cli("compare", *args))
        assert message in line and "OverflowError" not in line


@pytest.mark.parametrize(
    ("edit", "message"), BAD_RESULTS[:3] + BAD_RESULTS[7:], ids=BAD_IDS[:3] + BAD_IDS[7:]
)
def test_baseline_save_accepts_only_what_compare_accepts(kvmem_doc, tmp_path, edit, message):
    bad = _bad_copy(kvmem_doc, tmp_path, edit)
    dest = tmp_path / "baseline.json"
    assert message in one_error(cli("baseline", "save", bad, "--to", dest))
    assert not dest.exists()
    good = _write(tmp_path / "good.json", kvmem_doc)
    assert cli("baseline", "save", good, "--to", dest).exit_code == 0
    assert cli("compare", dest, good).exit_code == 0


def test_a_row_repeated_whole_is_one_row(tmp_path, monkeypatch):
    """Two models with one layer shape give the same params row twice: a study of them
    resumes, reports and compares (against itself, and against the row once)."""
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    config = _write(tmp_path / "two.yaml", "models: [llama-3-8b, mistral-7b]\nparams: {}\n")
    out = tmp_path / "study"
    assert cli("run", config, "--out", out, "-q").exit_code == 0
    results = out / RESULTS_FILE
    rows = load_document(results).sections["params"]
    assert len(rows) == 2 and rows[0] == rows[1]
    assert cli("run", config, "--out", out, "--resume", "-q").exit_code == 0
    assert cli("report", results, "-q").exit_code == 0
    once = json.loads(results.read_text())
    once["sections"]["params"]["records"].pop()
    assert cli("compare", results, _write(tmp_path / "once.json", once)).exit_code == 0
    assert cli("compare", results, results).exit_code == 0


def test_csv_results_are_validated_too(kvmem_doc, tmp_path):
    path = tmp_path / "k.csv"
    assert cli(*KVMEM_ARGS, "--csv", path, "-q").exit_code == 0
    lines = path.read_text().splitlines()
    good = _write(tmp_path / "good.csv", "\n".join(lines) + "\n")
    assert len(load_document(good).sections["kvmem"]) == 3
    header = lines[0].split(",")
    row = lines[2].split(",")
    row[header.index("kv_bytes")] = "1"
    bad = _write(tmp_path / "dup.csv", "\n".join([*lines, ",".join(row)]) + "\n")
    assert "dup.csv: kvmem record 3: a duplicate row" in one_error(cli("compare", good, bad))
    row = lines[1].split(",")
    row[header.index("kv_bytes")] = "inf"
    inf = _write(tmp_path / "inf.csv", "\n".join([lines[0], ",".join(row)]) + "\n")
    assert "kvmem record 0: kv_bytes: inf is not a finite number" in one_error(
        cli("compare", good, inf)
    )


def test_records_with_no_key_field_are_refused_by_their_file(kvmem_doc, tmp_path):
    """Not matched on nothing, which blamed the other file of a comparison."""
    empty = _write(tmp_path / "empty.json", {**kvmem_doc, "records": [{}]})
    good = _write(tmp_path / "good.json", kvmem_doc)
    for pair in ((good, empty), (empty, good)):
        error = one_error(cli("compare", *pair))
        assert error.startswith(f"error: {empty}: kvmem records: none has a key field")


def test_a_csv_saved_by_a_spreadsheet_reads_and_one_past_the_cell_limit_is_refused(
    kvmem_doc, tmp_path
):
    path = tmp_path / "k.csv"
    assert cli(*KVMEM_ARGS, "--csv", path, "-q").exit_code == 0
    text = path.read_text()
    bom = _write(tmp_path / "bom.csv", "\ufeff" + text)  # as Excel saves a CSV
    assert load_document(bom).sections["kvmem"] == load_document(path).sections["kvmem"]
    lines = text.splitlines()
    huge = _write(tmp_path / "huge.csv", "\n".join([lines[0], "M" * 200_000 + lines[1]]) + "\n")
    error = one_error(cli("compare", path, huge))
    assert "huge.csv: line" in error and "field larger than field limit" in error


@pytest.fixture(scope="module")
def run_doc(tmp_path_factory) -> dict:
    """A tiny study's results document: params, kvmem (not measured) and decode."""
    folder = tmp_path_factory.mktemp("run")
    config = _write(
        folder / "tiny.yaml",
        """\
defaults: {d_model: 32, num_heads: 2}
sweep: {num_kv_heads: [2, 1]}
params: {}
kvmem: {num_layers: 1, batch: 1, seq_len: [16, 256], dtype: float32, measure: false}
decode: {batch: 1, prompt_len: [2, 4], gen_len: 2, warmup: 0, repeats: 1, device: cpu}
""",
    )
    return run_study(plan_study(config), probe_peak=lambda device: 10.0).document


@pytest.mark.parametrize("command", ["plot", "report"])
def test_plot_and_report_refuse_a_run_without_environment(run_doc, tmp_path, command):
    doc = copy.deepcopy(run_doc)
    doc["environment"] = None
    path = _write(tmp_path / RESULTS_FILE, doc)
    line = one_error(cli(command, path))
    assert f"{path}: environment: expected an object" in line


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_threads", "two", "num_threads: expected an integer or null, got 'two'"),
        ("cpu_model", 5, "cpu_model: expected text or null, got 5"),
        ("peak_gbps", "fast", "peak_gbps: expected a number, got 'fast'"),
        ("cache_bytes", -1, "cache_bytes: -1 is negative"),
        ("peak_gbps_probes", [1.0, "a"], "peak_gbps_probes[1]: expected a number, got 'a'"),
        ("peak_tflops", 5, "peak_tflops: expected an object keyed by dtype, got 5"),
        ("peak_tflops", {"float32": "x"}, "peak_tflops.float32: expected a number"),
        ("peak_tflops_probes", {"float32": 1}, "peak_tflops_probes.float32: expected a list"),
    ],
)
def test_a_results_file_s_environment_is_checked_field_by_field(
    run_doc, tmp_path, field, value, message
):
    """What the gate matches environments on and the report reads the peaks from: a field
    of the wrong type is refused by name (it was taken as another machine, or read as
    no peak), in a merged study's share environments too; a field attnbench does not
    record is let be."""
    doc = copy.deepcopy(run_doc)
    doc["environment"]["made_by"] = ["someone"]
    assert load_document(_write(tmp_path / "fine.json", doc)).environment["made_by"]
    doc["environment"][field] = value
    path = _write(tmp_path / RESULTS_FILE, doc)
    assert f"{path}: environment: {message}" in one_error(cli("compare", path, path))
    merged = {**copy.deepcopy(run_doc), "environments": [doc["environment"]]}
    with pytest.raises(UsageError, match=re.escape(f"environments[0]: {message}")):
        load_document(_write(tmp_path / "merged.json", merged))


@pytest.mark.parametrize("field", ["step_repeats", "layouts", "prompt_len"])
def test_a_record_s_integers_are_sizes_and_counts(run_doc, tmp_path, field):
    """An integer a record declares, key or info, is never negative."""
    doc = copy.deepcopy(run_doc)
    doc["sections"]["decode"]["records"][0][field] = -1
    path = _write(tmp_path / RESULTS_FILE, doc)
    assert f"decode record 0: {field}: -1 is negative" in one_error(cli("compare", path, path))


@pytest.mark.parametrize("created", [[2024], {"at": 1}, 10**22, "not a date", "2024-13-45"])
def test_a_results_file_s_date_is_an_iso_date(run_doc, tmp_path, created):
    """What a history files a run under when no date is given: a list or a huge integer
    crashed the database, text that is no date was filed and ordered as one."""
    doc = {**copy.deepcopy(run_doc), "created": created}
    path = _write(tmp_path / RESULTS_FILE, doc)
    line = one_error(cli("history", "add", path, "--db", str(tmp_path / "h.db"), "--commit", "c1"))
    assert f"{path}: created: expected an ISO 8601 date and time" in line


@pytest.mark.parametrize("created", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_results_file_s_date_is_one_utc_holds(run_doc, tmp_path, created):
    """A date whose time in UTC falls outside the years 1 to 9999 (a history files runs by
    it): refused as the file is read, where `history add` stopped with a traceback."""
    path = _write(tmp_path / RESULTS_FILE, {**copy.deepcopy(run_doc), "created": created})
    for args in (["history", "add", path, "--db", str(tmp_path / "h.db")], ["compare", path, path]):
        line = one_error(cli(*args))
        assert f"{path}: created: '{created}' is outside the years 1 to 9999 in UTC" in line


def test_compare_does_not_write_over_the_history_it_reads(run_doc, tmp_path):
    path, db = _write(tmp_path / "r.json", run_doc), str(tmp_path / "h.db")
    assert cli("history", "add", path, "--db", db, "--commit", "c1").exit_code == 0
    before = Path(db).read_bytes()
    line = one_error(cli("compare", path, "--history", db, "--output", db))
    assert "--output" in line and "input" in line
    assert Path(db).read_bytes() == before


def test_a_run_s_model_parts_are_validated_as_a_command_s(run_doc, tmp_path):
    doc = copy.deepcopy(run_doc)
    part = {"model": "m", "num_kv_heads": 1, "variant": "MQA", "part": "total"}
    doc["model_parts"] = [{**part, "params": 10, "meta_params": 10, "weight_bytes": 20}]
    assert load_document(_write(tmp_path / "good.json", doc)).sections["model_parts"]
    doc["model_parts"][0]["params"] = -1
    path = _write(tmp_path / RESULTS_FILE, doc)
    assert f"{path}: model_parts record 0: params: -1 is negative" in one_error(cli("report", path))


def test_a_head_with_a_zero_median_fails_and_a_negative_one_is_rejected(run_doc, tmp_path):
    doc = copy.deepcopy(run_doc)
    base = _write(tmp_path / "base.json", doc)
    record = doc["sections"]["decode"]["records"][0]
    record.update(step_ms_median=0.0, step_ms_p25=0.0)
    record["samples_ms"] = [0.0] * len(record["samples_ms"])  # a median among its samples
    zero = _write(tmp_path / "zero.json", doc)
    result = cli("compare", base, zero, "--format", "json")
    assert result.exit_code == 1, result.output
    rows = json.loads(result.stdout)["rows"]
    (row,) = [r for r in rows if r["metric"] == "step_ms_median" and r["current"] == 0.0]
    assert row["verdict"] == "regressed" and "current median is 0 ms" in row["reason"]
    doc["sections"]["decode"]["records"][0]["step_ms_median"] = -0.5
    negative = _write(tmp_path / "negative.json", doc)
    assert "step_ms_median: -0.5 is negative" in one_error(cli("compare", base, negative))


def test_judge_timing_fails_a_current_median_that_is_not_positive():
    good = Measurement([], recorded=Summary(1.0, 0.9, 1.1))
    for median in (0.0, -1.0, float("nan")):
        judged = judge_timing(good, Measurement([], recorded=Summary(median)), Thresholds())
        assert judged.verdict is Verdict.REGRESSED and "current median" in judged.reason
    judged = judge_timing(Measurement([], recorded=Summary(0.0)), good, Thresholds())
    assert judged.verdict is Verdict.INCONCLUSIVE and "baseline median" in judged.reason


NON_FINITE = re.compile(r"\b(nan|inf)\b", re.IGNORECASE)


def test_plots_and_report_show_no_nan_or_inf(run_doc, tmp_path):
    doc = copy.deepcopy(run_doc)
    doc["environment"]["peak_gbps"] = float("inf")
    for r in doc["sections"]["kvmem"]["records"]:
        r["kv_bytes"], r["ratio_vs_mha"] = float("inf"), float("nan")
    for r in doc["sections"]["decode"]["records"]:
        r["pct_of_peak_bw"], r["speedup_vs_no_cache"] = float("inf"), float("nan")
        r["tokens_per_s"] = float("-inf")
    for r in doc["sections"]["params"]["records"]:
        r["ratio_vs_mha"] = float("nan")
    plots.render_plots(doc, tmp_path)  # draws what is finite, fails on nothing
    text = report.write_report(doc, tmp_path).read_text()
    assert not NON_FINITE.findall(text.split("## Configuration")[0]), text
    assert not NON_FINITE.findall(" ".join(report.findings(doc)))


# ------------------------------------------------------------------ 8. one writer per directory


def _lock(out: Path, pid: int, host: str | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    path.write_text(f"{pid} {host or socket.gethostname()}\n")
    return path


def test_a_second_run_into_a_directory_in_use_exits_2(study, tmp_path):
    out = tmp_path / "study"
    lock = _lock(out, os.getppid())  # a live process of this host
    line = one_error(cli("run", study, "--out", out, "-q"))
    assert f"--out {out}: in use by process {os.getppid()} on {socket.gethostname()}" in line
    assert lock.read_text() == f"{os.getppid()} {socket.gethostname()}\n"
    assert not (out / RESULTS_FILE).exists()
    _lock(out, 1, "another-host")  # a process elsewhere cannot be checked: never stale
    assert "in use by process 1 on another-host" in one_error(cli("run", study, "--out", out))


def test_a_stale_lock_is_taken_over_with_a_note(study, tmp_path, monkeypatch):
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(gone.stdout)
    out = tmp_path / "study"
    _lock(out, pid)
    result = cli("run", study, "--out", out, "-q")
    assert result.exit_code == 0, result.output
    assert f"note: {out / LOCK_FILE}: process {pid} on {socket.gethostname()}" in result.stderr
    assert "no longer running" in result.stderr
    assert not (out / LOCK_FILE).exists()


@pytest.mark.parametrize("pid", ["9" * 23, "9" * 1000], ids=["23-digits", "1000-digits"])
def test_a_lock_of_a_pid_no_process_can_have_is_stale(study, tmp_path, monkeypatch, pid):
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    out = tmp_path / "study"
    out.mkdir()
    (out / LOCK_FILE).write_text(f"{pid} {socket.gethostname()}\n")
    result = cli("run", study, "--out", out, "-q")
    assert result.exit_code == 0, result.output
    (note,) = result.stderr.splitlines()
    assert note.startswith(f"note: {out / LOCK_FILE}: process ") and len(note) < 250
    assert "no longer running; took its lock over" in note
    assert not (out / LOCK_FILE).exists()


@pytest.mark.parametrize(
    "lock",
    [
        b"\xff\xfe not a pid",
        "\u0663 host".encode(),
        b"12 host\nsecond line",
        b"9" * 5000 + b" host",
        "directory",
    ],
    ids=["bytes", "arabic-digit", "two-lines", "past-what-is-read", "directory"],
)
def test_a_lock_of_no_known_process_is_refused_on_one_line(study, tmp_path, lock):
    """Whoever wrote it may still be writing: only the user may remove it."""
    out = tmp_path / "study"
    out.mkdir()
    if lock == "directory":
        (out / LOCK_FILE).mkdir()
    else:
        (out / LOCK_FILE).write_bytes(lock)
    line = one_error(cli("run", study, "--out", out, "-q"))
    assert f"error: --out {out}: in use by " in line and "remove the lock file only if" in line
    assert (out / LOCK_FILE).exists() and not (out / RESULTS_FILE).exists()


def test_the_lock_is_held_for_the_whole_run_and_released(study, tmp_path, monkeypatch):
    held = []

    def plots_see_the_lock(doc, out):
        held.append((out / LOCK_FILE).read_text().split())
        return []

    monkeypatch.setattr("attnbench.render.plots.render_plots", plots_see_the_lock)
    out = tmp_path / "study"
    assert cli("run", study, "--out", out, "-q").exit_code == 0
    assert held == [[str(os.getpid()), socket.gethostname()]]
    assert not (out / LOCK_FILE).exists()
    store = DirectoryStore(out)
    with store.locked(), store.locked():  # re-entrant; the outer one releases
        assert (out / LOCK_FILE).exists()
    assert not (out / LOCK_FILE).exists()


def _csv_rows(path: Path) -> int:
    return len(path.read_text().splitlines()) - 1


def test_a_csv_left_without_a_study_is_kept_unless_forced(study, tmp_path, monkeypatch):
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    out = tmp_path / "study"
    out.mkdir()
    old = "variant,d_model\nold,1\nold,2\nold,3\nold,4\n"
    (out / "params.csv").write_text(old)
    assert "holds files that are not a study's (params.csv)" in one_error(
        cli("run", study, "--out", out, "-q")
    )
    assert (out / "params.csv").read_text() == old
    assert cli("run", study, "--out", out, "-q", "--force").exit_code == 0
    assert _csv_rows(out / "params.csv") == 3
    assert "old" not in (out / "params.csv").read_text()


def test_resume_rebuilds_csvs_that_disagree_with_the_results(study, tmp_path, monkeypatch):
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    out = tmp_path / "study"
    assert cli("run", study, "--out", out, "-q").exit_code == 0
    csv_path = out / "params.csv"
    good = csv_path.read_text()
    csv_path.write_text(good + good.splitlines()[-1] + "\n")  # a row kept twice
    assert cli("run", study, "--out", out, "--resume", "-q").exit_code == 0
    assert csv_path.read_text() == good
    csv_path.unlink()
    assert cli("run", study, "--out", out, "--resume", "-q").exit_code == 0
    assert csv_path.read_text() == good
    csv_path.write_text(good[:-5])  # the last row cut short: the next would run into it
    assert cli("run", study, "--out", out, "--resume", "-q").exit_code == 0
    assert csv_path.read_text() == good


# ------------------------------------------------------------------ 9. Ctrl-C at any moment


def test_ctrl_c_while_plotting_says_how_to_finish(study, tmp_path, monkeypatch):
    def interrupted(doc, out):
        raise KeyboardInterrupt

    monkeypatch.setattr("attnbench.render.plots.render_plots", interrupted)
    out = tmp_path / "study"
    result = cli("run", study, "--out", out, "-q")
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output
    assert (
        f"interrupted: the finished points are in {out}/; finish with: attnbench run "
        f"{study} --out {out} --resume"
    ) in " ".join(result.stderr.split())
    assert not (out / LOCK_FILE).exists()
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    assert cli("run", study, "--out", out, "--resume", "-q").exit_code == 0
    assert (out / "report.md").is_file()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_while_plotting_or_merging_releases_the_lock(study, tmp_path, monkeypatch, signum):
    """Past the points, where a run or a merge writes its plots: as Ctrl-C there."""
    seen = []

    def killed(doc, out):
        seen.append((out / LOCK_FILE).exists())
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.SIG_IGN):
            pytest.fail("nothing handles the signal while the lock is held")
        os.kill(os.getpid(), signum)
        return []

    monkeypatch.setattr("attnbench.render.plots.render_plots", killed)
    out = tmp_path / "study"
    result = cli("run", study, "--out", out, "-q")
    assert result.exit_code == 130, result.output
    assert f"finish with: attnbench run {study} --out {out} --resume" in result.stderr
    assert cli("run", study, "--out", tmp_path / "shared", "--shard", "0/1", "-q").exit_code == 0
    result = cli("merge", tmp_path / "shared", "--out", tmp_path / "merged", "-q")
    assert result.exit_code == 130, result.output
    assert (
        f"interrupted: the shares are as they were; merge again with: attnbench merge "
        f"{tmp_path / 'shared'} --out {tmp_path / 'merged'}"
    ) in result.stderr
    assert seen == [True, True]  # the share ran no plots
    assert not (out / LOCK_FILE).exists() and not (tmp_path / "merged" / LOCK_FILE).exists()
    assert signal.getsignal(signum) is signal.SIG_DFL


# ------------------------------------------------------------------ 10. output directories


@pytest.fixture
def studies(study, tmp_path, monkeypatch):
    """A finished study (for plot and report) and a study of one share (for merge)."""
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    assert cli("run", study, "--out", tmp_path / "done", "-q").exit_code == 0
    assert cli("run", study, "--out", tmp_path / "shared", "--shard", "0/1", "-q").exit_code == 0
    return tmp_path / "done", tmp_path / "shared"


def _writers(study: Path, done: Path, shared: Path) -> dict[str, list]:
    """Each command that writes a study's files into --out, before its --out."""
    results = done / RESULTS_FILE
    return {
        "run": ["run", study],
        "merge": ["merge", shared],
        "plot": ["plot", results],
        "report": ["report", results],
    }


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("command", ["run", "merge", "plot", "report"])
def test_a_directory_of_other_files_is_refused_and_left_whole(study, studies, tmp_path, command):
    args = _writers(study, *studies)[command]
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("report.md", "params.csv", "notes.txt", "kv_memory_heads.png"):
        (mine / name).write_text(f"the user's {name}\n")
    before = _files(mine)
    line = one_error(cli(*args, "--out", mine, "-q"))
    assert line.startswith(
        f"error: --out {mine}: holds files that are not a study's "
        "(kv_memory_heads.png, notes.txt, params.csv and 1 more); "
    )
    assert line.endswith("give an empty or new directory, or --force")
    assert _files(mine) == before
    assert cli(*args, "--out", mine, "-q", "--force").exit_code == 0
    assert (mine / "notes.txt").read_text() == "the user's notes.txt\n"


@pytest.mark.parametrize("command", ["run", "merge", "plot", "report"])
def test_a_missing_empty_or_study_directory_needs_no_force(study, studies, tmp_path, command):
    args = _writers(study, *studies)[command]
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "new" / "deeper", tmp_path / "empty"):
        assert cli(*args, "--out", out, "-q").exit_code == 0, out
    done, shared = studies
    (done / "notes.txt").write_text("beside a study\n")
    if command == "run":  # a study there: resumed, never started anew
        assert "already holds results" in one_error(cli(*args, "--out", done, "-q"))
    else:
        assert cli(*args, "--out", done, "-q").exit_code == 0
    assert (done / "notes.txt").read_text() == "beside a study\n"


def test_a_study_may_be_written_beside_its_sweep_file(study, tmp_path, monkeypatch):
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    assert cli("run", study, "--out", tmp_path, "-q").exit_code == 0
    assert (tmp_path / RESULTS_FILE).is_file()


def test_plot_and_report_write_beside_their_results(studies):
    done, _ = studies
    moved = done / "mine.json"
    (done / RESULTS_FILE).rename(moved)  # the folder of the results is the study's
    (done / "notes.txt").write_text("mine\n")
    assert cli("report", moved, "-q").exit_code == 0
    assert (done / "report.md").is_file()


# ------------------------------------------------------------------ 11. names too long

LONG = "a" * 300


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["params", "--d-model", "64", "--heads", "4", "--csv", f"{LONG}.csv"], "--csv 'aaa"),
        (
            ["kvmem", "--d-model", "64", "--heads", "4", "--no-measure", "--json", f"{LONG}.json"],
            "--json 'aaa",
        ),
        (["params", "--config", f"{LONG}.yaml"], "--config 'aaa"),
        (["params", "--hf-config", f"{LONG}.json"], "--hf-config 'aaa"),
        (["compare", f"{LONG}.json", "done/results.json"], "BASELINE 'aaa"),
        (["compare", "done/results.json", f"done/{LONG}.json"], "CURRENT 'done/aaa"),
        (["compare", "done/results.json", "done/results.json", "--output", LONG], "--output 'aaa"),
        (["baseline", "save", "done/results.json", "--to", LONG], "--to 'aaa"),
        (["run", f"{LONG}.yaml"], "'aaa"),
        (["run", "s.yaml", "--out", LONG], "--out 'aaa"),
        (["run", "s.yaml", "--out", f"done/{LONG}/x"], "--out 'done/aaa"),
        (["merge", LONG], "'aaa"),
        (["merge", "shared", "--out", LONG], "--out 'aaa"),
        (["plot", f"{LONG}.json"], "'aaa"),
        (["report", "done/results.json", "--out", LONG], "--out 'aaa"),
    ],
    ids=[
        "csv",
        "json",
        "config",
        "hf-config",
        "baseline",
        "current",
        "output",
        "baseline-to",
        "sweep",
        "out",
        "out-in-a-folder",
        "merge",
        "merge-out",
        "plot",
        "report-out",
    ],
)
def test_a_name_too_long_for_any_file_is_one_line_and_cut(studies, monkeypatch, args, start):
    """Names of more than 255 bytes: the system's ENAMETOOLONG, the value shown cut."""
    monkeypatch.chdir(studies[0].parent)
    line = one_error(cli(*args))
    assert line.startswith(f"error: {start}"), line
    assert "File name too long" in line and LONG not in line and len(line) < 200


#: A name no file can have: a lone surrogate that no byte stands for (argv on POSIX never
#: holds one, but a caller of the library, or a test, may pass it).
UNNAMEABLE = "\udd00"


@pytest.mark.parametrize(
    "args",
    [
        ["params", "--d-model", "64", "--heads", "4", "--csv", f"{UNNAMEABLE}.csv"],
        ["params", "--config", f"{UNNAMEABLE}.yaml"],
        ["compare", f"{UNNAMEABLE}.json", "done/results.json"],
        ["run", "s.yaml", "--out", UNNAMEABLE],
        ["history", "plot", "--db", "h.sqlite", "--out", f"{UNNAMEABLE}.png"],
    ],
    ids=["csv", "config", "baseline", "out", "history-plot"],
)
def test_a_name_no_file_can_have_is_one_line(studies, monkeypatch, args):
    monkeypatch.chdir(studies[0].parent)
    line = one_error(cli(*args))
    assert "'\\udd00" in line, line


def test_a_results_file_is_read_by_the_one_loader_of_user_files(tmp_path):
    """Pipes, devices, directories, huge files and text that is not UTF-8 are refused
    before anything is parsed, the file named; a pipe never blocks."""
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"command": "caf\xe9"}')
    big = sparse_file(tmp_path / "big.json", MAX_RESULTS_BYTES + 1)
    cases = {
        tmp_path: "is a directory, not a file",
        latin: "not UTF-8 text (byte 16)",
        big: "file too large (1.0 GiB; the limit is 1 GiB)",
    }
    if os.path.exists("/dev/zero"):
        cases[Path("/dev/zero")] = "not a regular file (a device, pipe or socket)"
    for path, reason in cases.items():
        with memory_guard(), pytest.raises(UsageError) as error:
            load_document(path)
        assert str(error.value) == f"{path}: {reason}"
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "pipe.json"
        os.mkfifo(fifo)
        outcome = in_thread(lambda: load_document(fifo), fifo=fifo)
        assert str(outcome["error"]) == f"{fifo}: not a regular file (a device, pipe or socket)"


def test_a_fit_whose_weights_exceed_the_memory_reads_back(tmp_path):
    """fit's free memory is a balance: below 0 where the weights and the reserve exceed
    the GPU's memory; its results document loads all the same (and the report is written
    from it), while a negative size elsewhere is still refused."""
    sweep = tmp_path / "fit.yaml"
    sweep.write_text("fit:\n  models: [mixtral-8x7b]\n  gpu: h100-sxm\n  seq_len: 4096\n")
    out = tmp_path / "out"
    assert runner.invoke(app, ["run", str(sweep), "--out", str(out), "-q"]).exit_code == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["sections"]["fit"]["records"][0]["free_bytes_per_gpu"] < 0
    assert load_document(out / "results.json").sections["fit"][0]["free_bytes_per_gpu"] < 0
    doc["sections"]["fit"]["records"][0]["weights_bytes_per_gpu"] = -1
    (out / "results.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="weights_bytes_per_gpu: -1 is negative"):
        load_document(out / "results.json")


@pytest.mark.parametrize(
    ("command", "args", "sections"),
    [
        ("predict", ["--gpu", "h100-sxm,a100-80gb"], {"p.csv": "predict"}),
        ("fit", ["--gpu", "h100-sxm"], {"p.csv": "fit"}),
        ("kvmem", ["--no-measure"], {"p.csv": "kvmem"}),
        ("params", [], {"p.csv": "params", "p.model_parts.csv": "model_parts"}),
    ],
)
def test_every_sections_csv_reads_back_as_its_section(tmp_path, command, args, sections):
    """A CSV names no section: each is told by its columns, whichever section wrote it
    (predict's too, which no column list named)."""
    words = [command, "--model", "llama-3-8b", *args, "--csv", str(tmp_path / "p.csv"), "-q"]
    words += ["--seq-len", "4096"] * (command != "params")
    assert runner.invoke(app, words).exit_code == 0
    for name, section in sections.items():
        doc = load_document(tmp_path / name)
        assert doc.command == section and list(doc.sections) == [section]
        assert doc.sections[section]


def test_a_calibration_file_given_as_results_says_so(tmp_path):
    calibration = tmp_path / "cal.json"
    fields = {"efficiency_bw": 0.8, "efficiency_flops": 0.7, "overhead_s": 0.0}
    calibration.write_text(json.dumps(fields))
    result = runner.invoke(app, ["compare", str(calibration), str(calibration)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {calibration}: a calibration file of the performance model, not results\n"
    )
