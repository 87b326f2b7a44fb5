"""The measuring and docs scripts under scripts/ run rarely (minutes each, on a quiet
machine), so nothing else would notice one that no longer imports after a library change:
each is imported here, its entry point and usage found, none of it run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.mark.parametrize("path", sorted(SCRIPTS.glob("*.py")), ids=lambda p: p.name)
def test_a_script_imports_and_says_how_to_run_it(path: Path, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the scripts import their shared helpers
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    assert module.__doc__, f"{path.name} has no docstring"
    if path.name != "planting.py":  # a helper the others import
        assert callable(getattr(module, "main", None)), f"{path.name} has no main()"
