"""`attnbench baseline exact`: the machine-independent baseline CI gates against."""

import json
from pathlib import Path

from attnbench.cli import app
from attnbench.gate.baseline import exact_document
from tests.helpers import runner

#: The packaged default study, which `baseline exact` uses when given no CONFIG.
CONFIG = Path(__file__).parents[2] / "attnbench" / "configs" / "default.yaml"


def _exact(tmp_path, name, *config):
    path = tmp_path / name
    result = runner.invoke(app, ["baseline", "exact", *map(str, config), "--to", str(path)])
    assert result.exit_code == 0, result.output
    assert f"wrote {path}" in " ".join(result.stdout.split())
    return path


def test_exact_baseline_has_params_and_unmeasured_kvmem(tmp_path):
    doc = json.loads(_exact(tmp_path, "a.json").read_text())
    assert doc["command"] == "run" and set(doc["sections"]) == {"params", "kvmem"}
    kvmem = doc["sections"]["kvmem"]["records"]
    assert kvmem and all(r["measured_bytes"] is None for r in kvmem)
    models = {r["model"] for r in kvmem}
    assert {"llama-2-7b", "llama-3-8b"} <= models
    params = doc["sections"]["params"]["records"]
    assert {r["variant"] for r in params} >= {"MHA", "GQA-2", "MQA"}


def test_the_default_is_the_packaged_study(tmp_path):
    assert CONFIG.is_file()
    default = json.loads(_exact(tmp_path, "default.json").read_text())
    given = json.loads(_exact(tmp_path, "given.json", CONFIG).read_text())
    assert default["sections"] == given["sections"]
    assert exact_document()["sections"] == default["sections"]


def test_regenerated_baseline_passes_and_a_changed_count_fails(tmp_path):
    base, cur = _exact(tmp_path, "base.json"), _exact(tmp_path, "cur.json", CONFIG)
    assert runner.invoke(app, ["compare", str(base), str(cur)]).exit_code == 0
    doc = json.loads(cur.read_text())
    doc["sections"]["params"]["records"][0]["total_params"] += 1
    cur.write_text(json.dumps(doc))
    result = runner.invoke(app, ["compare", str(base), str(cur), "--format", "markdown"])
    assert result.exit_code == 1
    assert "regressed" in result.output and "total_params" in result.output


def test_a_changed_kv_cache_size_fails(tmp_path):
    base, cur = _exact(tmp_path, "base.json"), _exact(tmp_path, "cur.json")
    doc = json.loads(cur.read_text())
    doc["sections"]["kvmem"]["records"][-1]["kv_bytes"] -= 2
    cur.write_text(json.dumps(doc))
    result = runner.invoke(app, ["compare", str(base), str(cur), "--format", "json"])
    assert result.exit_code == 1
    (row,) = [r for r in json.loads(result.stdout)["rows"] if r["verdict"] == "regressed"]
    assert (row["section"], row["metric"], row["current"] - row["baseline"]) == (
        "kvmem",
        "kv_bytes",
        -2,
    )


def test_unwritable_destination_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["baseline", "exact", "--to", str(blocker / "x.json")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(f"error: --to {blocker / 'x.json'}: cannot write")
