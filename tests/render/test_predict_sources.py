"""How `predict` names the source of every device figure at a narrow terminal: each figure
on a line of its own citing its sources as [n], the notes after them, then each URL once,
whole, on a line of its own (one to click or copy, not broken across lines)."""

from __future__ import annotations

import json
import re

import pytest

from attnbench.cli import app
from attnbench.render.predict import References
from tests.cli.test_predict_modes import results
from tests.helpers import runner

URL = re.compile(r"https?://[^\s;()]*[^\s;().,]")
FIGURE = "    - "  # a device's figure, under its device
REFERENCE = re.compile(r"^ *\[(\d+)\] (\S+)$")


def predicted(tmp_path, *args: str) -> tuple[list[str], list[dict]]:
    """The output lines of `predict args` at 80 columns, and its records."""
    out = tmp_path / "p.json"
    argv = ["predict", *args, "--seq-len", "2048", "--json", str(out)]
    result = runner.invoke(app, argv, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output.splitlines(), json.loads(out.read_text())["records"]


def cited(record: dict) -> list[str]:
    """Every URL a record's device figures and datasheets cite."""
    return URL.findall(record["device_figures"] + " " + record["peaks_source"])


def references(lines: list[str]) -> dict[str, str]:
    """The listed sources: number to URL."""
    return {m[1]: m[2] for m in map(REFERENCE.match, lines) if m}


def figures(lines: list[str]) -> dict[str, list[str]]:
    """Each device's figures as printed, their wrapped lines joined, by the device's line."""
    found: dict[str, list[str]] = {}
    device = ""
    for line in lines:
        if line.startswith("  - "):
            device = line
        elif line.startswith(FIGURE):
            found.setdefault(device, []).append(line.removeprefix(FIGURE))
        elif device in found and line.startswith(" " * len(FIGURE)):
            found[device][-1] += " " + line.strip()
    return found


def words(text: str) -> list[str]:
    """`text`'s words and URLs, without its punctuation."""
    return re.sub(r"[():;,]", " ", text).split()


POINTS = [
    ("--model", "llama-2-7b", "--gpu", "h100-sxm"),
    ("--model", "llama-2-70b", "--gpu", "h100-sxm,a100-80gb,mi300x", "--tp", "8"),
    ("--model", "llama-2-7b", "--gpu", "a100-80gb", "--weights-dtype", "int8"),
    ("--model", "deepseek-v3", "--gpu", "h200", "--tp", "8"),
]


@pytest.mark.parametrize("args", POINTS)
def test_each_url_is_listed_once_whole_on_a_line_of_its_own(tmp_path, args):
    lines, records = predicted(tmp_path, *args)
    urls = {url for r in records for url in cited(r)}
    listed = references(lines)
    assert sorted(listed.values()) == sorted(urls)  # each once
    assert list(listed) == [str(n) for n in range(1, len(urls) + 1)]
    for url in urls:  # nowhere else, and never broken
        assert sum(url in line for line in lines) == 1, url
    wrapped = [line for line in lines if not REFERENCE.match(line) and "wrote " not in line]
    assert all(len(line) <= 80 for line in wrapped)  # the rest wrapped between words


@pytest.mark.parametrize("args", POINTS)
def test_every_figure_still_names_its_sources(tmp_path, args):
    lines, records = predicted(tmp_path, *args)
    listed = references(lines)
    printed = figures(lines)
    for r in {r["gpu"]: r for r in records}.values():
        (shown,) = [f for device, f in printed.items() if device.startswith(f"  - {r['gpu']} (")]
        shown = [re.sub(r"\[(\d+)\]", lambda m: listed[m[1]], figure) for figure in shown]
        named = ("memory", "matmul TFLOPS", "launch", "load latency", "matmul tokens")
        for figure in (*named, "all-reduce"):
            (text,) = [f for f in shown if f.startswith(figure)]
            start = r["device_figures"].index(f"; {figure}" if figure != "memory" else figure)
            source = r["device_figures"][start:].lstrip("; ")
            assert words(source)[: len(words(text))] == words(text), figure  # and URLs
        assert shown[-1] == "datasheets " + r["peaks_source"].replace("; ", ", ")


def test_the_notes_come_before_the_sources(tmp_path):
    lines, _ = predicted(tmp_path, "--model", "llama-2-7b", "--gpu", "h100-sxm")
    start = lines.index("sources:")
    notes = " ".join(line.strip() for line in lines[:start])  # wrapped at 80 columns
    for note in ("kernel launches take", "their first bytes", "compute as zeros"):
        assert note in notes
    assert "+ launches + first loads + collectives" in notes
    assert all(REFERENCE.match(line) for line in lines[start + 1 : -1])
    assert lines[-1].startswith("wrote ")


def test_a_layer_shape_s_formula_names_the_kernels_first_loads(tmp_path):
    """A layer's rows wait the device's load latency too, though no model step is predicted
    to say how long."""
    lines, records = predicted(tmp_path, "--d-model", "4096", "--heads", "32", "--gpu", "h100-sxm")
    assert all(r.get("memory_latency_ms") is None for r in records)
    assert "+ launches + first loads + collectives" in " ".join(line.strip() for line in lines)


def test_a_check_lists_its_datasheets_whole(tmp_path):
    args = ["predict", "--check", str(results(tmp_path)), "--gpu", "h100-sxm"]
    lines = runner.invoke(app, args, env={"COLUMNS": "80"}).output.splitlines()
    listed = references(lines)
    assert any(line.endswith("[1], [2]") for line in lines) and len(listed) == 2
    assert all(url.startswith("https://resources.nvidia.com/") for url in listed.values())


def test_a_url_is_cited_by_its_number_where_its_text_cites_it():
    refs = References()
    assert refs.cite("triad, ND v5: https://a.example/x.md") == "triad, ND v5 [1]"
    assert refs.cite("share it reaches (https://b.example/y))") == "share it reaches [2])"
    both = "a step (https://c.example/z; checked, 8x H100: https://a.example/x.md)"
    assert refs.cite(both) == "a step ([3]; checked, 8x H100 [1])"
    assert refs.cite("https://d.example/w.") == "[4]."
    assert refs.lines()[0] == "[1] https://a.example/x.md" and len(refs.lines()) == 4
    for n in range(5, 11):
        refs.cite(f"https://e.example/{n}")
    assert refs.lines()[8:10] == [" [9] https://e.example/9", "[10] https://e.example/10"]
