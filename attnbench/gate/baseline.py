"""Baselines: a validated copy of a results document that `attnbench compare` gates against."""

from __future__ import annotations

from pathlib import Path

from ..errors import FieldError, UsageError
from ..study.documents import Document, load_document
from ..study.output import write_json_atomic

BASELINE_DIR = Path("results/baselines")
#: The baseline CI gates every change against: the default study's exact metrics on CPU.
EXACT_BASELINE = BASELINE_DIR / "cpu-exact.json"


def default_baseline_path(doc: Document) -> Path:
    """results/baselines/<name>.json: a study's (`attnbench run`'s results.json, whatever
    folder it was written to) by its sweep file, so that the baselines of two studies
    never share a name and a study's new baseline replaces its old one; any other
    document by its file's name."""
    config = (doc.raw or {}).get("config")
    source = config.get("source") if isinstance(config, dict) else None
    name = Path(source).stem if doc.command == "run" and isinstance(source, str) else ""
    return BASELINE_DIR / f"{name or Path(doc.path).stem}.json"


def load_baseline(results: str | Path) -> Document:
    """`results` (a command's JSON) validated as a baseline: a file compare accepts
    (study.documents.load_document), JSON (a CSV lacks the raw samples and the
    environment), with records to gate on."""
    doc = load_document(results)
    if doc.raw is None:
        raise UsageError(f"{results}: save the JSON a command wrote; a CSV has no samples")
    if not any(doc.sections.values()):
        raise UsageError(f"{results}: no records to gate on")
    return doc


def write_baseline(doc: Document, path: Path) -> None:
    """Write `doc` unchanged to `path`, replacing any file there."""
    try:
        write_json_atomic(path, doc.raw)
    except OSError as exc:
        raise UsageError(
            f"{exc.filename or path}: cannot write the baseline: {exc.strerror}"
        ) from None
    except ValueError as exc:
        raise UsageError(f"{path}: cannot write the baseline ({exc})") from None


def exact_document(config_path: str | Path | None = None) -> dict:
    """The exact metrics of a study (the default study when `config_path` is None): its
    params section, and its kvmem section computed without measuring, as a `run`
    document. Nothing here depends on the machine, so a change in it means the analytic
    model or a module changed."""
    from ..study.runner import DEFAULT_CONFIG, plan_study, run_study

    plan = plan_study(config_path, names=["params", "kvmem"], measure=False)
    doc = run_study(plan).document
    doc["config"] = {"source": str(config_path or DEFAULT_CONFIG)}
    return doc


def save_exact_baseline(config_path: str | Path | None, dest: str | Path) -> Path:
    path = Path(dest)
    document = exact_document(config_path)
    try:
        write_json_atomic(path, document)
    except OSError as exc:
        raise FieldError("to", path, f"cannot write: {exc.strerror}") from None
    return path
