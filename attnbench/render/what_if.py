"""The tables of a what-if set (a model rebuilt with other KV-head counts, beside its own,
see model/what_if.py): one row per variant, each against the model as published."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model.what_if import is_own
from .columns import NONE_TEXT, _bytes, _count, _model, _variant, fmt_int, fmt_status
from .table import Column

Row = Mapping[str, Any]


def fmt_change(v: Any) -> str:
    """A relative change against the model's own row: 0.133 -> '+13.3%'."""
    return NONE_TEXT if v is None else f"{v:+.1%}"


def fmt_times(v: Any) -> str:
    """A count against the model's own: 8.0 -> '8.00x'."""
    return NONE_TEXT if v is None else f"{v:.2f}x"


def against_own(field: str, fmt: Callable[[Any], str]) -> Callable[[Row], str]:
    """A cell maker for a comparison with the model's own row: 'own' on that row."""

    def cell(row: Row) -> str:
        own = is_own(row.get("num_kv_heads"), row.get("published_kv_heads"))
        return "own" if own else fmt(row.get(field))

    return cell


def in_what_if_set(row: Row) -> bool:
    return row.get("published_kv_heads") is not None


def _own(rows: Sequence[Row], model: str) -> Row | None:
    """The model's own row among `rows` of its what-if set."""
    for r in rows:
        if r["model"] == model and is_own(r["num_kv_heads"], r["published_kv_heads"]):
            return r
    return None


def whole_model_rows(parts: Sequence[Row]) -> list[dict[str, Any]]:
    """One row per variant of each what-if set among whole-model part rows: its attention
    and total parameters and weight bytes, and its total against the model's own."""
    totals = [r for r in parts if r["part"] == "total" and in_what_if_set(r)]
    attention = {
        (r["model"], r["num_kv_heads"]): r["params"] for r in parts if r["part"] == "attention"
    }
    rows = []
    for r in totals:
        own = _own(totals, r["model"])
        change = r["params"] / own["params"] - 1 if own else None
        attention_params = attention[(r["model"], r["num_kv_heads"])]
        rows.append({**r, "attention_params": attention_params, "change_vs_own": change})
    return rows


WHOLE_MODEL_WHAT_IF: list[Column] = [
    _model(0),
    _variant(0),
    _count("attention", "attention_params", 2),
    _count("total", "params", 1),
    _bytes("weights", "weight_bytes", 3),
    Column(
        "vs own", "change_vs_own", fmt_change, rank=1, cell=against_own("change_vs_own", fmt_change)
    ),
]


def what_if_set(rows: Sequence[Row], own: Row) -> list[dict[str, Any]]:
    """The fit answers of `own`'s what-if set (the same question of the same model), each
    with its answer (the batch, or the context) against the model's own; [] when `own`
    is in no set."""
    if not in_what_if_set(own):
        return []
    answer = "batch" if own["question"] == "largest_batch" else "seq_len"
    same = ("model", "question", "given", "memory_bytes_per_gpu", "gpus", "tp")
    return [
        {
            **r,
            "answer": r[answer],
            "answer_vs_own": r[answer] / own[answer] if own[answer] else None,
        }
        for r in rows
        if all(r[k] == own[k] for k in same) and in_what_if_set(r)
    ]


def fit_columns(question: str, rows: Sequence[Row]) -> list[Column]:
    """The columns of a what-if set's fit answers, headed by the question; the status
    when some variant does not fit."""
    header = "largest batch" if question == "largest_batch" else "longest context"
    columns = [
        _model(0),
        _variant(0),
        _bytes("KV / seq / GPU", "kv_bytes_per_sequence_per_gpu", 3),
        _bytes("weights / GPU", "weights_bytes_per_gpu", 4),
        Column(header, "answer", fmt_int, rank=1),
        Column(
            "vs own",
            "answer_vs_own",
            fmt_times,
            rank=2,
            cell=against_own("answer_vs_own", fmt_times),
        ),
    ]
    if any(r["status"] != "ok" for r in rows):  # the reason in short; fit_notes say it all
        columns.append(
            Column("Status", "status", fmt_status, rank=0, kind="status", noted_elsewhere=True)
        )
    return columns


def fit_notes(rows: Sequence[Row]) -> list[str]:
    """Why each variant that does not fit does not, and why one with fewer KV heads than
    tensor-parallel ranks saves nothing per GPU over one with as many: each rank keeps a
    copy of the heads it needs."""
    failed = [f"{r['variant']}: {r['status']}" for r in rows if r["status"] != "ok"]
    return failed + [
        f"{r['variant']}: {r['num_kv_heads']} KV head{'s' * (r['num_kv_heads'] > 1)} on "
        f"{r['tp']} ranks: each rank keeps a copy, so per GPU it caches as much as "
        f"{r['tp']} KV heads would"
        for r in rows
        if r["num_kv_heads"] < r["tp"]
    ]
