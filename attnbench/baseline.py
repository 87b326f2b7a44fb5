"""Baselines: a validated copy of a results document that `attnbench compare` gates against."""

from __future__ import annotations

from pathlib import Path

from .compare import Document, load_document
from .errors import UsageError
from .output import write_json_atomic

BASELINE_DIR = Path("results/baselines")


def default_baseline_path(results: str | Path) -> Path:
    """results/baselines/<stem of the results file>.json"""
    return BASELINE_DIR / f"{Path(results).stem}.json"


def save_baseline(results: str | Path, dest: str | Path | None = None) -> tuple[Path, Document]:
    """Validate `results` (JSON from --json) and write it unchanged to `dest`, replacing any
    file there. Only JSON will do: a CSV lacks the raw samples and the environment."""
    doc = load_document(results)
    if doc.raw is None:
        raise UsageError(f"{results}: save the JSON written by --json; a CSV has no samples")
    if not any(doc.sections.values()):
        raise UsageError(f"{results}: no records to gate on")
    path = Path(dest) if dest else default_baseline_path(results)
    try:
        write_json_atomic(path, doc.raw)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot write the baseline ({exc})") from None
    return path, doc
