"""Whether a study's results.json holds what the run has in memory: after a write fails
(a full disk), the records it lacks are kept in a file elsewhere."""

from __future__ import annotations

import json
from pathlib import Path


def unsaved(path: Path, document: dict | None) -> bool:
    """The results file at `path` lacks some records of `document`: a section holds
    another number of them there, or the file cannot be read as a study's results."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        counts = {n: len(s["records"]) for n, s in saved["sections"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True
    doc = document or {}
    return any(counts.get(n) != len(s["records"]) for n, s in doc.get("sections", {}).items())
