"""`attnbench baseline exact`: the machine-independent baseline CI gates against."""

import json

from typer.testing import CliRunner

from attnbench.cli import app

runner = CliRunner()
CONFIG = "configs/default.yaml"


def _exact(tmp_path, name):
    path = tmp_path / name
    result = runner.invoke(app, ["baseline", "exact", CONFIG, "--to", str(path)])
    assert result.exit_code == 0, result.output
    return path


def test_exact_baseline_has_params_and_unmeasured_kvmem(tmp_path):
    doc = json.loads(_exact(tmp_path, "a.json").read_text())
    assert doc["command"] == "run" and set(doc["sections"]) == {"params", "kvmem"}
    kvmem = doc["sections"]["kvmem"]["records"]
    assert kvmem and all(r["measured_bytes"] is None for r in kvmem)
    models = {r["model"] for r in kvmem}
    assert {"llama-2-7b", "llama-3-8b"} <= models


def test_regenerated_baseline_passes_and_a_changed_count_fails(tmp_path):
    base, cur = _exact(tmp_path, "base.json"), _exact(tmp_path, "cur.json")
    assert runner.invoke(app, ["compare", str(base), str(cur)]).exit_code == 0
    doc = json.loads(cur.read_text())
    doc["sections"]["params"]["records"][0]["total_params"] += 1
    cur.write_text(json.dumps(doc))
    result = runner.invoke(app, ["compare", str(base), str(cur), "--format", "markdown"])
    assert result.exit_code == 1
    assert "regressed" in result.output and "total_params" in result.output


def test_unwritable_destination_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["baseline", "exact", CONFIG, "--to", str(blocker / "x.json")])
    assert result.exit_code == 2 and "Traceback" not in result.output
