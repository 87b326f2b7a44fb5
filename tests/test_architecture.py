"""The package's layers: each subpackage imports only from the layers below it, the
model layer never imports torch, and every record field declares its kind.

The imports are read from the real source files (every `import`, at the top of a module
or inside a function) and resolved by Python's own rules (`importlib.util.resolve_name`);
the checker is then run on a copy of the package with upward imports planted, which it
must report."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
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
#: The entry points above every layer: the package's lazy exports and `python -m`.
ENTRY_POINTS = ("attnbench", "attnbench.__main__")


@dataclass(frozen=True)
class Import:
    """One import in a module of the package: the module it names, fully resolved."""

    importer: str  # dotted name, e.g. attnbench.model.formulas
    target: str  # dotted name, e.g. attnbench.cli.common
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line}: {self.importer} imports {self.target}"


def modules_of(root: Path) -> dict[str, Path]:
    """Every module of the package whose directory is `root`, by its dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    """Every module `name` (at `path`) imports, relative imports resolved against its own
    package as the interpreter resolves them; `from P import m` names the submodule P.m
    when there is one, else P."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            targets = [base, *(m for m in submodules if m in modules)]
        else:
            continue
        for target in targets:
            yield Import(name, target, path, node.lineno)


def layer_of(name: str) -> str | None:
    """The layer of a dotted module name of the package ('model', 'errors', ...); None for
    the entry points."""
    return None if name in ENTRY_POINTS else name.split(".")[1]


def upward_imports(root: Path) -> list[Import]:
    """The imports in the package at `root` of a layer above the importer's own."""
    modules = modules_of(root)
    found = []
    for name, path in modules.items():
        own = layer_of(name)
        if own is None:
            continue
        for imported in imports_of(name, path, modules):
            if imported.target.split(".")[0] != root.name:
                continue
            layer = layer_of(imported.target)
            if layer is not None and RANK[layer] > RANK[own]:
                found.append(imported)
    return found


def torch_imports(root: Path, layer: str) -> list[Import]:
    """The imports of torch (or any of its submodules) by the modules of `layer`."""
    modules = modules_of(root)
    return [
        imported
        for name, path in modules.items()
        if layer_of(name) == layer
        for imported in imports_of(name, path, modules)
        if imported.target.split(".")[0] == "torch"
    ]


def test_every_module_belongs_to_a_layer():
    """A new subpackage or top-level module must be placed among the layers, or the
    layer check would pass it unread."""
    for name in modules_of(PACKAGE):
        assert name in ENTRY_POINTS or layer_of(name) in RANK, name


def test_no_module_imports_from_a_higher_layer():
    upward = upward_imports(PACKAGE)
    assert not upward, "imports from a higher layer:\n" + "\n".join(map(str, upward))


def test_the_model_layer_does_not_import_torch():
    found = torch_imports(PACKAGE, "model")
    assert not found, "\n".join(map(str, found))


def test_the_checks_read_every_import_of_the_real_package():
    """The checker sees the package's real imports: relative ones of one and two dots,
    absolute ones, and the ones made inside a function, each resolved."""
    modules = modules_of(PACKAGE)
    assert "attnbench.model.formulas" in modules and "attnbench" in modules
    seen = {
        (imported.importer, imported.target)
        for name, path in modules.items()
        for imported in imports_of(name, path, modules)
    }
    assert ("attnbench.modules.attention", "attnbench.model.shapes") in seen  # ..model.shapes
    assert ("attnbench.modules.hf_attention", "attnbench.modules.workload") in seen  # .workload
    assert ("attnbench.__main__", "attnbench.cli") in seen  # inside main()
    assert any(t.startswith("torch") for i, t in seen if i.startswith("attnbench.modules."))


PLANTS = {
    "model/formulas.py": "from ..cli.common import fail\n",
    "model/units.py": "def late():\n    from attnbench.render import table\n",
    "modules/dtypes.py": "from .. import study\n",
    "measure/timing.py": "import attnbench.experiments.decode\n",
    "errors.py": "from .model import presets\n",
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    """A copy of the package with one upward import appended to each of PLANTS' modules,
    and torch imported by a model module."""
    root = tmp_path_factory.mktemp("planted") / "attnbench"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    for relative, source in PLANTS.items():
        path = root / relative
        path.write_text(path.read_text() + source)
    (root / "model" / "shapes.py").write_text(
        (root / "model" / "shapes.py").read_text() + "import torch.nn\n"
    )
    return root


def test_the_layer_check_reports_every_planted_upward_import(planted):
    """The plants and nothing else: the rest of the copy passes, as the package does."""
    upward = upward_imports(planted)
    found = {(str(i.path.relative_to(planted)), i.target) for i in upward}
    assert found == {
        ("model/formulas.py", "attnbench.cli.common"),
        ("model/units.py", "attnbench.render"),
        ("model/units.py", "attnbench.render.table"),
        ("modules/dtypes.py", "attnbench.study"),
        ("measure/timing.py", "attnbench.experiments.decode"),
        ("errors.py", "attnbench.model"),
        ("errors.py", "attnbench.model.presets"),
    }
    lines = {i.path.name: i.line for i in upward}
    assert lines["formulas.py"] == len((planted / "model/formulas.py").read_text().splitlines())


def test_the_torch_check_reports_a_planted_import(planted):
    (found,) = torch_imports(planted, "model")
    assert (found.path.name, found.target) == ("shapes.py", "torch.nn")


def test_a_relative_import_above_the_package_is_an_error(tmp_path):
    root = tmp_path / "attnbench"
    (root / "model").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "model" / "__init__.py").write_text("from ... import elsewhere\n")
    with pytest.raises(ImportError, match="beyond top-level package"):
        upward_imports(root)


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_every_record_field_declares_its_kind(name):
    record_type = RECORD_TYPES[name]
    for field in dataclasses.fields(record_type):
        assert isinstance(field.metadata.get("kind"), Kind), f"{name}.{field.name}"
