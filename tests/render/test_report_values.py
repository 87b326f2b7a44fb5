"""The report's findings state only rows that hold every value they state: a paged-cache
finding needs the comparison, its interval, the block size and the empty share (a
contiguous row, block_size null, has no blocks to name)."""

from __future__ import annotations

from attnbench.render import report


def _row(block_size: int | None, median: float, waste: float | None) -> dict:
    return {
        "variant": "MHA",
        "provider": "attnbench",
        "batch": 1,
        "prompt_len": 64,
        "block_size": block_size,
        "x_of_contiguous_median": median,
        "x_of_contiguous_ci_lo": median * 0.9,
        "x_of_contiguous_ci_hi": median * 1.1,
        "kv_waste_pct": waste,
        "status": "ok",
    }


def test_a_paged_finding_leaves_out_a_row_without_blocks():
    rows = [_row(16, 1.2, 25.0), _row(None, 1.0, None), _row(32, 1.1, None)]
    (finding,) = report.paged_findings(rows)
    assert "1.20x (1.08-1.32x) in blocks of 16 (25.0% of them empty)" in finding
    assert "blocks of 32" not in finding
