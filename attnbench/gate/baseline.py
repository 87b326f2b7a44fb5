"""Baselines: a validated copy of a results document that `attnbench compare` gates against."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..experiments.kvmem import kvmem_points, kvmem_record
from ..experiments.params import params_record
from ..gate.compare import Document, load_document
from ..measure.environment import collect_environment
from ..study.output import as_dict, document_header, write_json_atomic
from ..study.sweep import load_config, point_shape, resolve

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


def exact_document(config_path: str | Path) -> dict:
    """The exact metrics of a study: its params section, and its kvmem section computed
    without measuring, as a `run` document. Nothing here depends on the machine, so a
    change in it means the analytic model or a module changed."""
    config = load_config(config_path)
    params = resolve(config, "params")
    kvmem = resolve(config, "kvmem", {"measure": False})
    sections = {
        "params": {"config": params.to_dict(),
                   "records": [as_dict(params_record(point_shape(p))) for p in params.points()]},
        "kvmem": {"config": kvmem.to_dict(),
                  "records": [as_dict(kvmem_record(p, None, spec))
                              for p, spec in kvmem_points(kvmem)]},
    }  # fmt: skip
    header = document_header("run", {"source": str(config_path)}, collect_environment())
    return {**header, "sections": sections}


def save_exact_baseline(config_path: str | Path, dest: str | Path) -> Path:
    path = Path(dest)
    try:
        write_json_atomic(path, exact_document(config_path))
    except OSError as exc:
        raise UsageError(f"--to: cannot write {path} ({exc.strerror})") from None
    return path
