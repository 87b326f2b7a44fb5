"""Output conventions shared by the commands: a table on stdout, --quiet, exact CSV and
JSON holding the same records, the JSON layout, and `attnbench env`."""

from __future__ import annotations

import csv
import json
import platform
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import attnbench
import attnbench.modules.quantized_cache as cache_storage
from attnbench.cli import app

runner = CliRunner()

ENV_KEYS = [
    "attnbench_version", "python_version", "torch_version", "platform", "cpu_model",
    "num_threads", "device", "device_name", "cuda_version", "cudnn_version",
    "gpu_memory_bytes", "git_commit",
]  # fmt: skip
TOP_KEYS = [
    "schema_version", "command", "attnbench_version", "created", "environment", "config",
    "records",
]  # fmt: skip

KVMEM_ARGS = ["kvmem", "--d-model", "64", "--heads", "4", "--kv-heads", "4,2,1",
              "--seq-len", "8,32", "--batch", "1,3", "--device", "cpu"]  # fmt: skip
PARAMS_ARGS = ["params", "--d-model", "128", "--heads", "8", "--kv-heads", "8,4,1"]


def invoke_ok(args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def normalized(df: pd.DataFrame) -> list[dict]:
    """Rows as dicts, missing values (NaN from CSV, None from JSON) as None."""
    return df.astype(object).where(df.notna(), None).to_dict("records")


# --------------------------------------------------------------------- the table


def test_table_on_stdout():
    result = invoke_ok([*KVMEM_ARGS, "--no-measure"])
    assert result.stderr == ""
    out = result.stdout
    assert "KV-cache memory" in out
    for header in ("Variant", "per token", "per layer", "whole model", "measured", "Status"):
        assert header in out
    for variant in ("MHA", "GQA-2", "MQA"):
        assert variant in out
    # 1 layer, 4 KV heads of 16, fp16: 2 * 4 * 16 * 2 = 256 bytes per token
    assert "256 B" in out


def test_params_table_on_stdout():
    result = invoke_ok(PARAMS_ARGS)
    assert "Attention parameters" in result.stdout
    # MHA: 4 * 128 * 128 = 65,536 parameters
    assert "65,536" in result.stdout


@pytest.mark.parametrize("args", [[*KVMEM_ARGS, "--measure"], PARAMS_ARGS])
def test_quiet_prints_nothing_on_success(tmp_path, args):
    csv_path, json_path = tmp_path / "o.csv", tmp_path / "o.json"
    result = invoke_ok([*args, "--quiet", "--csv", csv_path, "--json", json_path])
    assert result.output == ""
    assert csv_path.exists() and json_path.exists()


def test_quiet_still_prints_errors():
    result = runner.invoke(app, ["kvmem", "--d-model", "64", "--heads", "4", "--kv-heads", "3",
                                 "--quiet"])  # fmt: skip
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error:")
    assert "--kv-heads 3" in result.stderr


def test_errors_go_to_stderr():
    result = runner.invoke(app, ["kvmem", "--model", "nope-7b"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "nope-7b" in result.stderr


def test_not_quiet_says_where_files_went(tmp_path):
    csv_path = tmp_path / "sub" / "o.csv"
    result = invoke_ok([*PARAMS_ARGS, "--csv", csv_path])
    assert str(csv_path) in result.stdout
    assert csv_path.exists()  # the folder is created


# ------------------------------------------------------------------ JSON and CSV


def test_json_layout(tmp_path):
    path = tmp_path / "k.json"
    before = datetime.now(timezone.utc).replace(microsecond=0)
    invoke_ok([*KVMEM_ARGS, "--no-measure", "--json", path, "-q"])
    after = datetime.now(timezone.utc)
    doc = json.loads(path.read_text())
    for key in TOP_KEYS:
        assert key in doc
    assert doc["schema_version"] == 1
    assert doc["command"] == "kvmem"
    assert doc["attnbench_version"] == attnbench.__version__
    created = datetime.fromisoformat(doc["created"])
    assert created.tzinfo is not None
    assert before - timedelta(seconds=1) <= created <= after + timedelta(seconds=1)
    env = doc["environment"]
    for key in ENV_KEYS:
        assert key in env
    assert env["attnbench_version"] == attnbench.__version__
    assert env["python_version"] == platform.python_version()
    assert env["torch_version"] == torch.__version__
    assert env["num_threads"] == torch.get_num_threads()
    assert env["device"] == "cpu"
    assert isinstance(doc["config"], dict)
    assert len(doc["records"]) == 3 * 2 * 2  # kv heads x seq_len x batch
    # exact byte counts are JSON integers, not floats
    assert all(isinstance(r["kv_bytes"], int) for r in doc["records"])


def test_json_config_records_the_flags(tmp_path):
    path = tmp_path / "k.json"
    invoke_ok([*KVMEM_ARGS, "--no-measure", "--json", path, "-q"])
    config = json.loads(path.read_text())["config"]
    assert config["batch"] == [1, 3]
    assert config["seq_len"] == [8, 32]
    assert config["num_kv_heads"] == [4, 2, 1]


def test_json_written_atomically(tmp_path):
    path = tmp_path / "k.json"
    path.write_text("old contents")
    invoke_ok([*PARAMS_ARGS, "--json", path, "-q"])
    assert json.loads(path.read_text())["command"] == "params"
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"]  # no temporary left behind


@pytest.mark.parametrize(
    "args",
    [[*KVMEM_ARGS, "--measure"], [*KVMEM_ARGS, "--no-measure"], PARAMS_ARGS,
     ["kvmem", "--model", "falcon-7b", "--seq-len", "1024,4096", "--no-measure"]],
    ids=["kvmem-measured", "kvmem-not-measured", "params", "kvmem-model"],
)  # fmt: skip
def test_csv_and_json_hold_the_same_records(tmp_path, args):
    csv_path, json_path = tmp_path / "o.csv", tmp_path / "o.json"
    invoke_ok([*args, "--csv", csv_path, "--json", json_path, "-q"])
    from_csv = pd.read_csv(csv_path)
    from_json = pd.DataFrame(json.loads(json_path.read_text())["records"])
    assert list(from_csv.columns) == list(from_json.columns)
    assert normalized(from_csv) == normalized(from_json)


def test_csv_and_json_agree_on_skipped_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_storage, "free_memory_bytes", lambda device: 2048)
    csv_path, json_path = tmp_path / "o.csv", tmp_path / "o.json"
    invoke_ok([*KVMEM_ARGS, "--csv", csv_path, "--json", json_path, "-q"])
    records = json.loads(json_path.read_text())["records"]
    skipped = [r for r in records if r["status"].startswith("skipped")]
    assert skipped and len(skipped) < len(records)
    assert all(r["measured_bytes"] is None and r["kv_bytes"] > 2048 for r in skipped)
    assert normalized(pd.read_csv(csv_path)) == normalized(pd.DataFrame(records))


def test_csv_values_are_exact(tmp_path):
    csv_path = tmp_path / "o.csv"
    invoke_ok(["kvmem", "--model", "gpt3-175b", "--batch", "8", "--seq-len", "2048",
               "--no-measure", "--csv", csv_path, "-q"])  # fmt: skip
    (row,) = list(csv.DictReader(csv_path.open()))
    # 2 * 96 layers * 96 KV heads * 128 * 2 bytes (fp16) = 4,718,592 bytes per token;
    # x 8 x 2048 = 77,309,411,328 bytes: written in full, not as "72.00 GiB" or 7.7e10
    assert row["bytes_per_token"] == "4718592"
    assert row["kv_bytes"] == "77309411328"
    assert row["kv_bytes_per_layer"] == str(77309411328 // 96)
    assert row["ratio_vs_mha"] == "1.0"
    assert row["measured_bytes"] == ""


# ------------------------------------------------------------------------- env


def test_env_prints_every_key():
    result = invoke_ok(["env", "--device", "cpu"])
    keys = [line.split(":", 1)[0] for line in result.stdout.splitlines() if ":" in line]
    for key in ENV_KEYS:
        assert key in keys
    assert f"attnbench_version: {attnbench.__version__}" in result.stdout
    assert f"torch_version: {torch.__version__}" in result.stdout
    assert "device: cpu" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_env_cuda_without_cuda_exits_2():
    result = runner.invoke(app, ["env", "--device", "cuda"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_version():
    result = invoke_ok(["--version"])
    assert attnbench.__version__ in result.stdout
