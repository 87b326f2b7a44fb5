"""The package's layers: each subpackage imports only from the layers below it, the
model layer never imports torch, and every record field declares its kind."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from attnbench.records import Kind
from attnbench.study.sections import RECORD_TYPES

PACKAGE = Path(__file__).resolve().parent.parent / "attnbench"
#: Lowest first: a module may import from its own layer and the ones before it.
LAYERS = (
    "errors",
    "records",
    "model",
    "modules",
    "measure",
    "experiments",
    "study",
    "gate",
    "ab",
    "history",
    "render",
    "cli",
)
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK["records"] = RANK["errors"]  # both are the base every layer shares


def _layer(parts: tuple[str, ...]) -> str | None:
    """The layer of a module path inside the package ('model', 'errors', ...)."""
    head = parts[0].removesuffix(".py")
    return head if head in RANK else None


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported attnbench module path, line) for every import of the package in `path`."""
    rel = path.relative_to(PACKAGE).parts
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel[: len(rel) - node.level])
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names = (
                    [target] if node.module else [f"{'.'.join(base)}.{a.name}" for a in node.names]
                )
                found += [(n.strip("."), node.lineno) for n in names]
            elif node.module and node.module.startswith("attnbench."):
                found.append((node.module.removeprefix("attnbench."), node.lineno))
        elif isinstance(node, ast.Import):
            found += [
                (a.name.removeprefix("attnbench."), node.lineno)
                for a in node.names
                if a.name.startswith("attnbench.")
            ]
    return found


MODULES = [p for p in PACKAGE.rglob("*.py") if _layer(p.relative_to(PACKAGE).parts)]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_from_a_higher_layer(path):
    own = _layer(path.relative_to(PACKAGE).parts)
    upward = []
    for target, line in _imports(path):
        layer = _layer(tuple(target.split(".")))
        if layer is not None and RANK[layer] > RANK[own]:
            upward.append(f"line {line}: {target}")
    assert not upward, f"{own} imports from a higher layer: {upward}"


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The check itself: an import of study from model is found."""
    source = "from ..study.runner import run_study\nfrom .shapes import AttentionShape\n"
    fake = PACKAGE / "model" / "formulas.py"
    tree = ast.parse(source)
    targets = [
        ".".join([*fake.relative_to(PACKAGE).parts[: -n.level], *n.module.split(".")])
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
    ]
    layers = [_layer(tuple(t.split("."))) for t in targets]
    assert layers == ["study", "model"]


def test_the_model_layer_does_not_import_torch():
    for path in (PACKAGE / "model").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not any(n.split(".")[0] == "torch" for n in names), path


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_every_record_field_declares_its_kind(name):
    record_type = RECORD_TYPES[name]
    for field in dataclasses.fields(record_type):
        assert isinstance(field.metadata.get("kind"), Kind), f"{name}.{field.name}"
