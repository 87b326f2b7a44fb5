"""The gate's report: the summary line, the count of the findings left out, markdown and
the table."""

from __future__ import annotations

import json

from attnbench.gate.compare import Finding, Verdict, compare_documents
from attnbench.render.gate import (
    Spelling,
    _label,
    print_table,
    render_markdown,
    report_text,
    summary_line,
    unchanged_line,
)
from attnbench.render.table import plain_console
from attnbench.study.documents import load_document

SPELLING = Spelling(show_all="--all", other_formats="--format markdown or json")
ENV = {"device": "cpu", "torch_version": "2.4.0", "num_threads": 4}


def params_document(extra: int = 0) -> dict:
    """A params result of two variants; `extra` parameters added to the second."""
    rows = []
    for variant, kv in (("MHA", 8), ("MQA", 1)):
        q = o = 512 * 512
        k = v = 512 * 64 * kv
        total = q + k + v + o + (extra if variant == "MQA" else 0)
        rows.append(
            dict(
                variant=variant,
                d_model=512,
                num_heads=8,
                num_kv_heads=kv,
                head_dim=64,
                bias=False,
                q_params=q,
                k_params=k,
                v_params=v,
                o_params=o,
                total_params=total,
                module_params=q + k + v + o,
                ratio_vs_mha=total / (4 * q),
            )
        )
    return {
        "schema_version": 1,
        "command": "params",
        "attnbench_version": "0.1.0",
        "created": "2026-01-01T00:00:00+00:00",
        "environment": ENV,
        "config": {},
        "records": rows,
    }


def comparison(tmp_path, extra: int):
    base, cur = tmp_path / "base.json", tmp_path / "cur.json"
    base.write_text(json.dumps(params_document()))
    cur.write_text(json.dumps(params_document(extra)))
    return compare_documents(load_document(str(base)), load_document(str(cur)))


def test_one_more_parameter_fails_and_the_rest_is_counted(tmp_path):
    result = comparison(tmp_path, 1)
    assert summary_line(result).startswith("FAIL (exit 1): 1 regressed")
    unchanged = sum(f.verdict.value == "unchanged" for f in result.findings)
    assert unchanged_line(result, True, SPELLING) == (
        f"{unchanged} unchanged findings not shown: --all shows them."
    )
    assert unchanged_line(result, False, SPELLING) is None
    markdown = render_markdown(result, True, SPELLING)
    assert markdown.startswith("**attnbench compare: FAIL (exit 1)")
    assert "<details open>" in markdown and "| regressed | params | MQA | total_params |" in (
        markdown
    )
    assert "`--all` shows them" in markdown
    assert report_text(result, "markdown", True, SPELLING) == markdown
    assert json.loads(report_text(result, "json", False, SPELLING)) == result.to_dict(False)


def test_a_file_against_itself_passes_and_its_table_lists_nothing(tmp_path):
    result = comparison(tmp_path, 0)
    assert summary_line(result).startswith("PASS (exit 0)")
    out = plain_console(width=120, color_system=None, record=True)
    print_table(out, result, True, 120, SPELLING)
    text = out.export_text()
    assert "Verdict" not in text  # no changed finding: no table
    assert text.splitlines()[-1] == summary_line(result)


def test_a_row_that_leaves_a_field_out_names_it_with_a_dash():
    """A field that varies over the rows and that one row leaves out (a bare shape's
    model, beside named models' rows) reads 'model=-', not 'model=None'."""
    config = {"model": None, "variant": "MHA", "seq_len": 1024}
    row = Finding("kvmem", config, None, None, None, None, Verdict.NEW, "row not in baseline")
    varying = {("kvmem", "model"), ("kvmem", "seq_len")}
    assert _label(row, varying) == "model=- MHA seq_len=1024"
