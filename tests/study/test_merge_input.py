"""A share's `shard` block, as merging and resuming read it: every field checked, and a
bad one refused in one line naming the file and the field (exit 2), never a traceback,
a negative count of missing points, or a record dropped or put out of place."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from attnbench.cli import app
from tests.helpers import one_error, runner

STUDY = """
defaults: {d_model: 64, num_heads: 4}
sweep: {num_kv_heads: [4, 2, 1]}
params: {}
kvmem: {seq_len: [16, 32], measure: false}
"""


def cli(*args: object):
    return runner.invoke(app, [*map(str, args), "-q"], env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def shares(tmp_path_factory) -> Path:
    """STUDY run as two shares (0/2: params 0 and 2, kvmem 1, 3 and 5), not merged."""
    folder = tmp_path_factory.mktemp("shares")
    (folder / "study.yaml").write_text(STUDY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
        for i in range(2):
            result = cli("run", folder / "study.yaml", "--out", folder / "out", "--shard", f"{i}/2")
            assert result.exit_code == 0, result.output
    return folder / "out"


def edited(shares: Path, tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of the shares with share 0/2's results.json changed by `edit`."""
    copy = tmp_path / "study"
    shutil.copytree(shares, copy)
    path = copy / "shards" / "0-of-2" / "results.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return copy


def setter(*keys: str, value: object) -> Callable[[dict], None]:
    """An edit setting doc[keys...] to `value`."""

    def edit(doc: dict) -> None:
        for key in keys[:-1]:
            doc = doc[key]
        doc[keys[-1]] = value

    return edit


def deleter(*keys: str) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        for key in keys[:-1]:
            doc = doc[key]
        del doc[keys[-1]]

    return edit


def extra_record(doc: dict) -> None:
    """A record more than shard.indices lists: a conflicting GQA-2 row."""
    records = doc["sections"]["params"]["records"]
    records.append({**records[1], "variant": "GQA-2", "num_kv_heads": 2, "total_params": 5})


BAD = [
    (deleter("shard", "index"), "shard.index: missing"),
    (setter("shard", "index", value="x"), "shard.index 'x': expected an integer from 0 to 1"),
    (setter("shard", "index", value=1.5), "shard.index 1.5: expected an integer from 0 to 1"),
    (setter("shard", "index", value=None), "shard.index null: expected an integer from 0 to 1"),
    (setter("shard", "count", value=0), "shard.count 0: expected an integer from 1 to 100,000"),
    (setter("shard", "indices", value=None), "shard.indices null: expected an object"),
    (setter("shard", "indices", "params", value=3), "shard.indices.params 3: expected a list"),
    (deleter("shard", "indices", "kvmem"), "shard.indices.kvmem: missing"),
    (setter("shard", "points", "kvmem", value="x"), "shard.points.kvmem 'x': expected an integer"),
    (setter("shard", "points", "params", value=True), "shard.points.params true: expected"),
    (setter("shard", "points", "params", value=0), "shard.points.params 0: expected"),
    (setter("shard", "points", "params", value=-1), "shard.points.params -1: expected"),
    (setter("shard", "points", "params", value=1.5), "shard.points.params 1.5: expected"),
    (deleter("sections", "params"), "shard.points.params: names no section of the share"),
    (
        setter("shard", "indices", "params", value=[100, 2]),
        "shard.indices.params[0] 100: expected an integer from 0 to 2",
    ),
    (
        setter("shard", "indices", "params", value=[2, 2]),
        "shard.indices.params[1] 2: the same point as shard.indices.params[0]",
    ),
    (
        extra_record,
        "sections.params: holds 3 records, but shard.indices.params lists 2 points",
    ),
    (setter("shard", value="0/2"), "shard '0/2': expected an object"),
]


@pytest.mark.parametrize(("edit", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_shard_block_is_refused_naming_file_and_field(shares, tmp_path, edit, message):
    study = edited(shares, tmp_path, edit)
    line = one_error(cli("merge", study, "--out", tmp_path / "merged"))
    assert line.startswith(f"error: {study / 'shards' / '0-of-2' / 'results.json'}: {message}")
    assert not (tmp_path / "merged").exists()


def test_shares_that_count_the_points_differently_are_refused(shares, tmp_path):
    study = edited(shares, tmp_path, setter("shard", "points", "params", value=4))
    line = one_error(cli("merge", study, "--out", tmp_path / "merged"))
    assert "shard.points" in line and "the shares of one study count the same points" in line


def test_a_share_stopped_part_way_still_merges_as_incomplete(shares, tmp_path):
    """Fewer records than shard.indices lists: what a share interrupted leaves."""
    study = edited(shares, tmp_path, lambda doc: doc["sections"]["kvmem"]["records"].pop())
    result = cli("merge", study, "--out", tmp_path / "merged")
    assert result.exit_code == 1, result.output
    assert "incomplete: 1 kvmem point(s) are in no share yet" in result.stderr


def test_a_merge_names_only_the_files_it_wrote(tmp_path, monkeypatch):
    """A section no share has run yet has no CSV: the summary lists the files there are."""
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    study = tmp_path / "two.yaml"
    study.write_text(
        "params: {d_model: 4096, num_heads: 32, num_kv_heads: 8}\n"
        "kvmem: {d_model: 4096, num_heads: 32, num_kv_heads: 8, measure: false}\n"
    )
    out = tmp_path / "out"
    assert cli("run", study, "--out", out, "--shard", "0/2").exit_code == 0
    result = runner.invoke(app, ["merge", str(out)], env={"COLUMNS": "250"})  # not quiet
    assert result.exit_code == 1 and "Merged shares 0/2: 1 point." in result.output
    (wrote,) = [line for line in result.output.splitlines() if line.startswith("Wrote ")]
    assert re.findall(r"[\w-]+\.(?:csv|json)", wrote) == ["params.csv", "results.json"]
    assert not (out / "kvmem.csv").exists()


def test_resuming_a_share_checks_its_shard_block(shares, tmp_path):
    study = edited(shares, tmp_path, setter("shard", "indices", "params", value=None))
    sweep = shares.parent / "study.yaml"
    line = one_error(cli("run", sweep, "--out", study, "--shard", "0/2", "--resume"))
    assert line.startswith(f"error: {study / 'shards' / '0-of-2' / 'results.json'}: shard.indices")


def test_shares_of_other_counts_that_measured_one_point_twice_are_refused(tmp_path, monkeypatch):
    """0/2 and 0/3 run apart both hold point 0: which timing would the study keep? (the
    first directory's, without a word). Shares a resume split anew never overlap."""
    monkeypatch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    for share in ("0/2", "0/3"):
        out = tmp_path / share.replace("/", "-")
        assert cli("run", study, "--out", out, "--shard", share).exit_code == 0
    first, second = tmp_path / "0-2" / "shards" / "0-of-2", tmp_path / "0-3" / "shards" / "0-of-3"
    line = one_error(cli("merge", first, second, "--out", tmp_path / "m"))
    assert "point 0 is also in share 0/2" in line
