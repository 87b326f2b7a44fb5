"""Output conventions shared by the commands: a table on stdout, --quiet, exact CSV and
JSON holding the same records, the JSON layout, and `attnbench env`."""

from __future__ import annotations

import csv
import json
import platform
import re
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
import torch

import attnbench
from attnbench.cli import app
from attnbench.cli.flags import parse_field
from attnbench.experiments import kvmem
from attnbench.study.output import write_outputs
from attnbench.study.runner import DirectoryStore, plan_command, run_study
from tests.helpers import runner

ENV_KEYS = [
    "attnbench_version",
    "python_version",
    "torch_version",
    "platform",
    "cpu_model",
    "num_threads",
    "device",
    "device_name",
    "cuda_version",
    "cudnn_version",
    "gpu_memory_bytes",
    "git_commit",
]
TOP_KEYS = [
    "schema_version",
    "command",
    "attnbench_version",
    "created",
    "environment",
    "config",
    "records",
]

KVMEM_ARGS = [
    "kvmem",
    "--d-model",
    "64",
    "--heads",
    "4",
    "--kv-heads",
    "4,2,1",
    "--seq-len",
    "8,32",
    "--batch",
    "1,3",
    "--device",
    "cpu",
]
#: KVMEM_ARGS computed, not measured: on no device.
COMPUTED_ARGS = [*KVMEM_ARGS[:-2], "--no-measure"]
PARAMS_ARGS = ["params", "--d-model", "128", "--heads", "8", "--kv-heads", "8,4,1"]


def invoke_ok(args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def normalized(df: pd.DataFrame) -> list[dict]:
    """Rows as dicts, missing values (NaN from CSV, None from JSON) as None."""
    return df.astype(object).where(df.notna(), None).to_dict("records")


# --------------------------------------------------------------------- the table


def header_cells(out: str) -> list[str]:
    """The column headers of the (first) table in `out`."""
    line = next(line for line in out.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in line.strip("┃").split("┃")]


def test_table_on_stdout():
    result = invoke_ok([*KVMEM_ARGS, "--measure", "--wide"])
    assert result.stderr == ""
    out = result.stdout
    assert "KV-cache memory" in out
    assert header_cells(out) == [
        "Variant",
        "kv heads",
        "batch",
        "context",
        "per token",
        "per layer",
        "whole model",
        "measured",
        "vs MHA",
        "Status",
    ]
    # settings every row shares are said once, in the title
    assert "1 layer · 4 heads · head_dim 16 · float16" in out.splitlines()[0]
    for variant in ("MHA", "GQA-2", "MQA"):
        assert variant in out
    # 1 layer, 4 KV heads of 16, fp16: 2 * 4 * 16 * 2 = 256 bytes per token
    assert "256 B" in out
    assert "columns hidden" not in out


def test_a_narrow_table_hides_columns_and_says_so():
    every = header_cells(invoke_ok([*KVMEM_ARGS, "--measure", "--wide"]).stdout)
    narrow = runner.invoke(app, [*KVMEM_ARGS, "--measure"], env={"COLUMNS": "60"})
    assert narrow.exit_code == 0, narrow.output
    shown = header_cells(narrow.stdout)
    assert {"Variant", "whole model"} <= set(shown) and len(shown) < len(every)
    assert all(len(line) <= 60 for line in narrow.stdout.splitlines() if line[:1] in tuple("┏┃┡│└"))
    footer = re.search(
        r"(\d+) columns hidden \((.*)\): --wide, or --csv$", " ".join(narrow.stdout.split())
    )
    assert footer is not None, narrow.stdout
    hidden = footer.group(2).split(", ")
    assert int(footer.group(1)) == len(hidden)
    assert sorted(hidden) == sorted(set(every) - set(shown))
    wide = runner.invoke(app, [*KVMEM_ARGS, "--measure", "--wide"], env={"COLUMNS": "60"})
    assert header_cells(wide.stdout) == every and "columns hidden" not in wide.stdout


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
    result = runner.invoke(
        app, ["kvmem", "--d-model", "64", "--heads", "4", "--kv-heads", "3", "--quiet"]
    )
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
    """A measured run's: its environment holds the torch it measured with."""
    path = tmp_path / "k.json"
    before = datetime.now(timezone.utc).replace(microsecond=0)
    invoke_ok([*KVMEM_ARGS, "--json", path, "-q"])
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


def test_a_run_that_measures_nothing_records_torch_by_its_package(tmp_path):
    """Its points computed, it loads no torch (tests/cli/test_startup.py): torch's version
    is its installed package's, and its threads and CUDA build, which only a loaded torch
    tells, are None."""
    path = tmp_path / "k.json"
    invoke_ok([*COMPUTED_ARGS, "--json", path, "-q"])
    env = json.loads(path.read_text())["environment"]
    assert list(env) == ENV_KEYS
    assert env["torch_version"] == torch.__version__
    assert (env["num_threads"], env["cuda_version"], env["device"]) == (None, None, "cpu")


def test_json_config_records_the_flags(tmp_path):
    path = tmp_path / "k.json"
    invoke_ok([*COMPUTED_ARGS, "--json", path, "-q"])
    config = json.loads(path.read_text())["config"]
    assert config["batch"] == [1, 3]
    assert config["seq_len"] == [8, 32]
    assert config["num_kv_heads"] == [4, 2, 1]


def test_json_written_atomically(tmp_path):
    path = tmp_path / "k.json"
    path.write_text('{"old": "contents"}')  # an earlier JSON output (anything else is kept)
    invoke_ok([*PARAMS_ARGS, "--json", path, "-q"])
    assert json.loads(path.read_text())["command"] == "params"
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"]  # no temporary left behind


@pytest.mark.parametrize(
    "args",
    [
        [*KVMEM_ARGS, "--measure"],
        COMPUTED_ARGS,
        PARAMS_ARGS,
        ["kvmem", "--model", "falcon-7b", "--seq-len", "1024,4096", "--no-measure"],
    ],
    ids=["kvmem-measured", "kvmem-not-measured", "params", "kvmem-model"],
)
def test_csv_and_json_hold_the_same_records(tmp_path, args):
    csv_path, json_path = tmp_path / "o.csv", tmp_path / "o.json"
    invoke_ok([*args, "--csv", csv_path, "--json", json_path, "-q"])
    from_csv = pd.read_csv(csv_path)
    from_json = pd.DataFrame(json.loads(json_path.read_text())["records"])
    assert list(from_csv.columns) == list(from_json.columns)
    assert normalized(from_csv) == normalized(from_json)


def kvmem_with_2048_bytes_free(store=None):
    """The kvmem study of KVMEM_ARGS, measured on a device that says 2048 bytes are free."""
    flags = dict(zip(KVMEM_ARGS[1::2], KVMEM_ARGS[2::2], strict=True))
    names = {
        "--d-model": "d_model",
        "--heads": "num_heads",
        "--kv-heads": "num_kv_heads",
        "--seq-len": "seq_len",
        "--batch": "batch",
        "--device": "device",
    }
    overrides = {names[f]: parse_field(names[f], text) for f, text in flags.items()}
    plan = plan_command("kvmem", None, {**overrides, "measure": True})

    def execute(task, context):
        return kvmem.run(task.point, context, free_bytes=lambda device: 2048)

    return plan, run_study(plan, store, command="kvmem", execute=execute)


def test_csv_and_json_agree_on_skipped_rows(tmp_path):
    csv_path, json_path = tmp_path / "o.csv", tmp_path / "o.json"
    plan, result = kvmem_with_2048_bytes_free()
    write_outputs(
        "kvmem",
        result.records["kvmem"],
        kvmem.KvmemRecord,
        plan.sections["kvmem"].to_dict(),
        result.environment,
        str(csv_path),
        str(json_path),
    )
    records = json.loads(json_path.read_text())["records"]
    skipped = [r for r in records if r["status"].startswith("skipped")]
    assert skipped and len(skipped) < len(records)
    assert all(r["measured_bytes"] is None and r["kv_bytes"] > 2048 for r in skipped)
    measured = [r for r in records if not r["status"].startswith("skipped")]
    assert all(r["measured_bytes"] == r["kv_bytes"] <= 2048 for r in measured)
    assert normalized(pd.read_csv(csv_path)) == normalized(pd.DataFrame(records))


def test_a_study_directory_agrees_on_skipped_rows(tmp_path):
    """`run` keeps results.json and appends each row to the section's CSV as it goes."""
    _, result = kvmem_with_2048_bytes_free(DirectoryStore(tmp_path))
    records = json.loads((tmp_path / "results.json").read_text())["sections"]["kvmem"]["records"]
    assert records == result.section_records("kvmem") and len(records) == 12
    assert any(r["status"].startswith("skipped") for r in records)
    assert normalized(pd.read_csv(tmp_path / "kvmem.csv")) == normalized(pd.DataFrame(records))


def test_csv_values_are_exact(tmp_path):
    csv_path = tmp_path / "o.csv"
    invoke_ok(
        [
            "kvmem",
            "--model",
            "gpt3-175b",
            "--batch",
            "8",
            "--seq-len",
            "2048",
            "--no-measure",
            "--csv",
            csv_path,
            "-q",
        ]
    )
    (row,) = list(csv.DictReader(csv_path.open()))
    # 2 * 96 layers * 96 KV heads * 128 * 2 bytes (fp16) = 4,718,592 bytes per token;
    # x 8 x 2048 = 77,309,411,328 bytes: written in full, not as "72.00 GiB" or 7.7e10
    assert row["bytes_per_token"] == "4718592"
    assert row["kv_bytes"] == "77309411328"
    assert row["kv_bytes_per_layer"] == str(77309411328 // 96)
    assert row["ratio_vs_mha"] == "1.0"
    assert row["measured_bytes"] == ""


def test_params_with_a_model_writes_its_parts(tmp_path):
    json_path, csv_path = tmp_path / "F.json", tmp_path / "G.csv"
    invoke_ok(["params", "--model", "llama-2-7b", "--json", json_path, "--csv", csv_path, "-q"])
    doc = json.loads(json_path.read_text())
    parts = {r["part"]: r for r in doc["model_parts"]}
    assert {r["model"] for r in doc["model_parts"]} == {"llama-2-7b"}
    total = parts["total"]
    assert total["params"] == total["meta_params"] == 6_738_415_616
    assert total["weight_bytes"] == 2 * 6_738_415_616  # float16
    assert total["params"] == sum(r["params"] for p, r in parts.items() if p != "total")
    assert [r["total_params"] for r in doc["records"]] == [4 * 4096 * 4096]

    side = csv_path.with_name(csv_path.stem + ".model_parts.csv")
    assert side.is_file()
    assert normalized(pd.read_csv(side)) == normalized(pd.DataFrame(doc["model_parts"]))
    assert normalized(pd.read_csv(csv_path)) == normalized(pd.DataFrame(doc["records"]))

    same = runner.invoke(app, ["compare", str(json_path), str(json_path), "--format", "json"])
    assert same.exit_code == 0, same.output
    report = json.loads(same.stdout)
    assert {r["section"] for r in report["rows"]} == {"params", "model_parts"}
    assert runner.invoke(app, ["compare", str(side), str(side)]).exit_code == 0

    doc["model_parts"][-1]["params"] += 1
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    result = runner.invoke(app, ["compare", str(json_path), str(changed), "--format", "json"])
    assert result.exit_code == 1
    (row,) = [r for r in json.loads(result.stdout)["rows"] if r["verdict"] == "regressed"]
    assert (row["section"], row["config"]["part"], row["metric"]) == (
        "model_parts",
        "total",
        "params",
    )


def test_params_without_a_model_writes_no_parts(tmp_path):
    json_path, csv_path = tmp_path / "F.json", tmp_path / "G.csv"
    invoke_ok([*PARAMS_ARGS, "--json", json_path, "--csv", csv_path, "-q"])
    assert "model_parts" not in json.loads(json_path.read_text())
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["F.json", "G.csv"]


# ------------------------------------------------------------------------- env


def test_env_prints_every_key():
    result = invoke_ok(["env", "--device", "cpu"])
    keys = [line.split(":", 1)[0] for line in result.stdout.splitlines() if ":" in line]
    for key in ENV_KEYS:
        assert key in keys
    assert f"attnbench_version: {attnbench.__version__}" in result.stdout
    assert f"torch_version: {torch.__version__}" in result.stdout
    assert "device: cpu" in result.stdout
    if not torch.cuda.is_available():  # values as the results file spells them
        assert "cuda_version: null" in result.stdout and "None" not in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_env_cuda_without_cuda_exits_2():
    result = runner.invoke(app, ["env", "--device", "cuda"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_version():
    result = invoke_ok(["--version"])
    assert attnbench.__version__ in result.stdout


# --- user text printed as written ----------------------------------------------------------

#: Text that rich would read as markup or an emoji code, and Markdown or matplotlib as
#: markup or a formula.
MARKUP_NAME = "org/[bold]x[/] :x: [/] a$\\frac{x$_^ *y*"


def _llama_config(tmp_path, name: str):
    config = {
        "_name_or_path": name,
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 1000,
        "intermediate_size": 688,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_a_model_name_is_printed_as_written(tmp_path):
    path = _llama_config(tmp_path, MARKUP_NAME)
    result = runner.invoke(
        app, ["kvmem", "--hf-config", str(path), "--no-measure"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    assert MARKUP_NAME in result.stdout
    assert "❌" not in result.stdout


def test_an_error_about_user_text_is_printed_as_written():
    result = runner.invoke(
        app, ["decode-speed", "--device", "cu[/]da:x:", "--d-model", "64", "--heads", "4"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --device cu[/]da:x:"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_study_of_a_model_named_like_markup(tmp_path):
    """Its plots draw the name as text (no mathtext), its report escapes it for Markdown."""
    _llama_config(tmp_path, MARKUP_NAME)
    study = tmp_path / "study.yaml"
    study.write_text("models: [config.json]\nkvmem:\n  seq_len: [512, 1024]\n")
    result = runner.invoke(app, ["run", str(study), "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "kv_memory_context.png").is_file()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "org/\\[bold\\]x\\[/\\] :x: \\[/\\] a\\$\\\\frac{x\\$\\_^ \\*y\\*" in report


@pytest.mark.parametrize("columns", ["²", "٣", "x", "-5"])
def test_a_terminal_size_that_is_no_number_is_ignored(columns):
    result = runner.invoke(app, PARAMS_ARGS, env={"COLUMNS": columns, "LINES": columns})
    assert result.exit_code == 0, (result.output, result.exception)
    assert "GQA-4" in result.stdout


def test_a_csv_write_that_fails_keeps_the_file_it_was_to_replace(tmp_path, monkeypatch):
    """A full disk mid-write: the previous CSV stays whole, and no temporary file stays."""
    import errno

    from attnbench.study import output

    path = tmp_path / "p.csv"
    path.write_text("variant,total_params\nMHA,1\n")

    def full_disk(self, rows):
        self.writerow(next(iter(rows)))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output.csv.DictWriter, "writerows", full_disk)
    with pytest.raises(OSError, match="No space left"):
        output.write_csv(path, [{"variant": "MQA", "total_params": 2}] * 3)
    assert path.read_text() == "variant,total_params\nMHA,1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.csv"]
