"""Standard output that cannot take what a command prints: closed by the shell (`>&-`), a
reader gone (`| head`), a full device (`> /dev/full`); and a terminal size of 0. Each
runs the command in a process of its own, as a shell would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Other processes, as `make test-integration` runs them.
pytestmark = pytest.mark.integration

#: Bad input a command refuses before it loads torch: its one line must reach the user.
BAD = ["params", "--d-model", "64", "--heads", "4", "--kv-heads", "3"]
BAD_LINE = "error: invalid combination --d-model 64 --heads 4 --kv-heads 3"
#: A command that prints a table, without torch.
TABLE = ["params", "--d-model", "64", "--heads", "4"]


def attnbench(args: list[str], **options) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100", **options.pop("env", {})}
    return subprocess.run(
        [sys.executable, "-m", "attnbench", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=300,
        **options,
    )


def test_a_closed_standard_output_drops_the_output_not_the_error():
    done = subprocess.run(
        ["sh", "-c", f"exec {sys.executable} -m attnbench {' '.join(BAD)} >&-"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.startswith(BAD_LINE), done.stderr
    ran = subprocess.run(
        ["sh", "-c", f"exec {sys.executable} -m attnbench {' '.join(TABLE)} >&-"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0 and ran.stderr == ""


def test_a_reader_gone_exits_as_a_shell_says_a_pipe_closed_not_as_a_regression():
    """Exit 1 is compare's "regression" and fit's "does not fit": a reader that went
    (`| head -1`) gives 141, as a shell reports a process stopped by SIGPIPE."""
    read, write = os.pipe()
    os.close(read)  # gone before the first byte
    try:
        done = attnbench(TABLE, stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_full_device_is_one_line_and_exit_2():
    with open("/dev/full", "w") as full:
        done = attnbench(TABLE, stdout=full)
    assert done.returncode == 2
    assert done.stderr == "error: cannot write the output: No space left on device\n"


def test_a_terminal_size_of_0_still_prints_the_error():
    """rich prints nothing, errors included, on a console 0 columns wide."""
    done = attnbench(BAD, stdout=subprocess.PIPE, env={"COLUMNS": "0"})
    assert done.returncode == 2 and done.stderr.startswith(BAD_LINE), done.stderr


def test_a_study_whose_reader_has_gone_is_not_blamed_on_its_directory(tmp_path):
    """`run ... | head -1`: the reader gone, not the --out directory ('cannot write:
    None'); the points finished so far stay in its results.json."""
    study = tmp_path / "study.yaml"
    study.write_text("defaults: {d_model: 64, num_heads: 4}\nparams: {num_kv_heads: [4, 1]}\n")
    read, write = os.pipe()
    os.close(read)
    try:
        done = attnbench(["run", str(study), "--out", str(tmp_path / "out")], stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert "--out" not in done.stderr
    assert (tmp_path / "out" / "results.json").is_file()
