"""Status lines (`wrote PATH ...`) are one line each, so a log can be searched and a path
copied from it, whatever the width tables are fitted to."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from tests.helpers import runner


def long_path(tmp_path, name: str):
    """A path far longer than any terminal is wide."""
    return tmp_path.joinpath(*["a-rather-long-folder-name"] * 16, name)


def params_json(tmp_path):
    path = tmp_path / "params.json"
    args = ["params", "--d-model", "128", "--heads", "8", "--kv-heads", "8,1", "--json", path]
    result = runner.invoke(app, [*map(str, args), "-q"])
    assert result.exit_code == 0, result.output
    return path


def test_a_long_path_is_written_where_it_says(tmp_path):
    src = params_json(tmp_path)
    dest = long_path(tmp_path, "saved.json")
    result = runner.invoke(app, ["baseline", "save", str(src), "--to", str(dest)])
    assert result.exit_code == 0, result.output
    assert json.loads(dest.read_text()) == json.loads(src.read_text())
    assert f"wrote {dest}" in "".join(result.stdout.splitlines())


@pytest.mark.parametrize("command", ["baseline save", "compare --output"])
def test_a_status_line_is_never_wrapped(tmp_path, command):
    src = params_json(tmp_path)
    dest = long_path(tmp_path, "out.json")
    if command == "baseline save":
        args = ["baseline", "save", str(src), "--to", str(dest)]
    else:
        args = ["compare", str(src), str(src), "--output", str(dest), "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"wrote {dest}")


# --- values in other scripts' digits ----------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda:²", "cuda:٣", "cuda:", "cuda:-1", "cuda:0x1", "gpu"])
def test_a_device_other_than_auto_cpu_cuda_or_cuda_digits_is_named(device):
    args = ["kvmem", "--d-model", "8", "--heads", "2", "--no-measure", "-q", "--device", device]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert (
        result.stderr
        == f"error: --device {device}: unknown device; use auto, cpu, cuda or cuda:<index>\n"
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["kvmem", "--d-model", "8", "--heads", "2", "--device", ""], "--device ''"),
        (["baseline", "save", "results.json", "--to", ""], "--to ''"),  # not the default path
        (["history", "show", "--where", " "], "--where ' '"),
        (["plot", ""], "RESULTS ''"),  # not the current folder
        (["compare", "base.json", ""], "CURRENT ''"),
    ],
)
def test_a_value_given_empty_is_refused_not_read_as_left_out(args, named):
    """An empty value (a variable the shell found unset) reads as the option left out, or
    as the current folder: `baseline save --to ''` replaced the default baseline."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {named}: empty; give a ")


@pytest.mark.parametrize(
    "name, device",
    [
        ("cpu", "cpu"),
        (" CPU ", "cpu"),
        ("auto", "cpu"),
        ("cuda", None),
        ("cuda:0", None),
        ("CUDA:12", None),
    ],
)
def test_a_device_name_parses_before_cuda_is_asked_for(name, device, monkeypatch):
    import torch

    from attnbench.measure import devices

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if device is not None:
        assert devices.resolve_device(name) == torch.device(device)
        return
    with pytest.raises(FieldError, match="requested but CUDA is not available here"):
        devices.resolve_device(name)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--batch", "٣"),
        ("--seq-len", "1,²"),
        ("--layers", "1_0"),
        ("--tp", "0x2"),
        ("--kv-scale-group", "١٢٨"),
    ],
)
def test_a_number_is_written_in_ascii_digits(flag, value):
    args = ["kvmem", "--d-model", "8", "--heads", "2", "--no-measure", "-q", flag, value]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {flag} {value}: expected integer")


def test_a_results_file_of_schema_version_true_is_refused(tmp_path):
    src = params_json(tmp_path)
    doc = json.loads(src.read_text())
    src.write_text(json.dumps({**doc, "schema_version": True}))
    result = runner.invoke(app, ["compare", str(src), str(src)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {src}: schema_version true is not supported (expected 1)\n"


def test_a_reason_names_the_fields_it_mentions_as_the_user_gave_them():
    """In a file's terms by field name, on the command line by flag; braces the reason
    does not list as mentions stay as written."""
    from attnbench.cli.flags import describe_error

    error = FieldError("seq_len", 1, "give {seq_len} or {batch}, not {x}", ("seq_len", "batch"))
    assert str(error) == "seq_len: 1: give seq_len or batch, not {x}"
    assert describe_error(error) == "--seq-len 1: give --seq-len or --batch, not {x}"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["params", "--d-model", "64", "--d-model=128", "--heads", "4"], "--d-model"),
        (["predict", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpu", "h200"], "--gpu"),
        (["run", "--config", "a.yaml", "--config", "b.yaml", "--dry-run"], "--config"),
        (["history", "show", "--db", "a.sqlite", "--db", "b.sqlite"], "--db"),
    ],
)
def test_an_option_given_twice_is_refused_not_dropped(args, flag):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {flag} given 2 times; give it once (see ")


def test_a_flag_may_repeat():
    result = runner.invoke(app, ["params", "--d-model", "64", "--heads", "4", "-q", "-q"])
    assert result.exit_code == 0, result.output


def test_an_output_through_a_symlink_loop_is_refused_before_the_work(tmp_path):
    """Refused by the outputs' check, not by the write after the work (which keeps the
    records elsewhere and says so)."""
    loop = tmp_path / "a.json"
    loop.symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(loop)
    result = runner.invoke(app, ["params", "--d-model", "64", "--heads", "4", "--json", str(loop)])
    assert result.exit_code == 2
    assert result.stderr == f"error: --json {loop}: Too many levels of symbolic links\n"


def test_an_output_under_a_symlink_to_nothing_is_refused_naming_it(tmp_path):
    """A folder cannot be made over a dangling symlink: the system says only 'File
    exists'."""
    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    why = f"{link} is a symlink to nothing ({tmp_path / 'nowhere'})"
    args = ["params", "--d-model", "64", "--heads", "4", "--json", str(link / "p.json")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stderr == f"error: --json {link / 'p.json'}: {why}\n"
    study = tmp_path / "s.yaml"
    study.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {}\n")
    for out in (link, link / "study"):
        result = runner.invoke(app, ["run", str(study), "--out", str(out), "-q"])
        assert result.exit_code == 2
        assert result.stderr == f"error: --out {out}: cannot use it: {why}\n"


def test_an_empty_model_is_named_empty():
    result = runner.invoke(app, ["params", "--model", ""])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --model '': empty; give a value")


def test_a_config_json_given_as_model_is_named_as_given():
    """--model takes a path as well as a preset: its problem names --model, as typed."""
    result = runner.invoke(app, ["params", "--model", "./no-such-model"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --model ./no-such-model: no such file")


def test_an_output_ending_in_a_slash_is_a_folder_not_a_file(tmp_path):
    """'out/' read as a path is 'out': a file of that name was written."""
    out = f"{tmp_path}/out/"
    result = runner.invoke(app, ["params", "--d-model", "64", "--heads", "4", "--json", out])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: --json {out}: names a folder (it ends with /)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "typed"),
    [
        (
            ["kvmem", "--model", "llama-3-8b", "--dtype", "float16,,float32"],
            "--dtype float16,,float32",
        ),
        (
            ["fit", "--model", "llama-3-8b", "--seq-len", "1024", "--memory", "80GiB,"],
            "--memory 80GiB,",
        ),
        (["kvmem", "--model", "llama-3-8b", "--kv-heads", "8,,4"], "--kv-heads 8,,4"),
        (["kvmem", "--model", "llama-3-8b", "--seq-lens", "8x512,,"], "--seq-lens 8x512,,"),
    ],
)
def test_an_empty_item_of_a_list_is_named_with_the_list_as_typed(args, typed):
    """'--memory 80GiB,' was refused as "--memory '': bad size", the item for the list."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {typed}: an empty item in the list")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["baseline", "save", "RESULTS", "--to", "TARGET"], "--to"),
        (["baseline", "exact", "--to", "TARGET"], "--to"),
        (["compare", "RESULTS", "RESULTS", "--output", "TARGET"], "--output"),
        (["params", "--d-model", "64", "--heads", "4", "--json", "TARGET"], "--json"),
        (["params", "--d-model", "64", "--heads", "4", "--csv", "TARGET"], "--csv"),
    ],
)
@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        ("history.db", b"SQLite format 3\x00" + bytes(100), "an SQLite database (a history?)"),
        ("data.bin", b"\x89PNG\r\n\x1a\n\x00\x00", "a binary file"),
        ("notes.txt", b"my notes\n", "a file that is not JSON"),
    ],
)
def test_an_output_never_replaces_a_file_of_another_kind(tmp_path, args, flag, name, content, what):
    """A history, a binary file, or text where a JSON document goes (notes, a sweep file)
    is no earlier output of this kind: a slip of the path would lose it. Refused, the
    file kept; an earlier output of the kind is replaced as ever."""
    target = tmp_path / name
    target.write_bytes(content)
    results = params_json(tmp_path)
    argv = [str(results) if a == "RESULTS" else str(target) if a == "TARGET" else a for a in args]
    result = runner.invoke(app, argv)
    text_ok = flag in ("--output", "--csv") and name == "notes.txt"
    if text_ok and flag == "--output":  # a report is text: any text may be replaced
        assert result.exit_code == 0, result.output
        return
    if text_ok:
        what = "a file that is not CSV"
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {flag} {target}: is {what}, not an earlier output of this kind; "
        "not replaced: give another path\n"
    )
    assert target.read_bytes() == content
    again = tmp_path / "again"
    assert runner.invoke(app, [a.replace(str(target), str(again)) for a in argv]).exit_code == 0
    assert runner.invoke(app, [a.replace(str(target), str(again)) for a in argv]).exit_code == 0
