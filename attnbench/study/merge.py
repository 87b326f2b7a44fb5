"""Putting the shares of a study back together: every share's records in the study's
point order, one document, as if one worker had run it all.

The shares must come from the same study (the same resolved configuration) and the same
split (i/N with one N); a point in two shares is refused. Speed-ups that link rows of
different shares are filled in again over the merged records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..records import as_dict
from .documents import load_results
from .plan import first_difference
from .sections import KINDS
from .shards import SHARDS_DIR
from .stores import RESULTS_FILE


@dataclass
class Merged:
    document: dict
    shards: list[str]  # the shares merged, "i/N"
    missing: dict[str, int]  # points of each section no share recorded

    @property
    def complete(self) -> bool:
        return not any(self.missing.values())


def shard_results(paths: Sequence[Path]) -> list[Path]:
    """The results.json of every share under `paths`: each a study directory (its
    shards/*/), or one share's directory."""
    found: list[Path] = []
    for path in paths:
        if (path / RESULTS_FILE).is_file() and not (path / SHARDS_DIR).is_dir():
            found.append(path / RESULTS_FILE)
            continue
        shares = sorted((path / SHARDS_DIR).glob(f"*/{RESULTS_FILE}"))
        if not shares:
            raise UsageError(
                f"{path}: no shares of a study here (no {SHARDS_DIR}/*/{RESULTS_FILE})"
            )
        found.extend(shares)
    return found


def merge(paths: Sequence[Path]) -> Merged:
    """The shares under `paths` as one study document."""
    files = shard_results(paths)
    docs = [(file, load_results(file)) for file in files]
    first_file, first = docs[0]
    for file, doc in docs:
        if "shard" not in doc:
            raise UsageError(f"{file}: not a share of a study (a whole study, run unshared)")
        _check_same_study(first_file, first, file, doc)
    sections: dict[str, dict[int, dict]] = {name: {} for name in first["sections"]}
    seen: dict[str, str] = {}
    for file, doc in docs:
        shard = doc["shard"]
        name = f"{shard['index']}/{shard['count']}"
        if name in seen:
            raise UsageError(f"{file}: share {name} is also in {seen[name]}")
        seen[name] = str(file)
        for section, body in doc["sections"].items():
            for index, record in zip(shard["indices"][section], body["records"], strict=False):
                sections[section][index] = record
    points = first["shard"]["points"]
    merged = {key: value for key, value in first.items() if key not in ("shard", "sections")}
    merged["environments"] = [
        {"shard": f"{d['shard']['index']}/{d['shard']['count']}", **d["environment"]}
        for _, d in docs
    ]
    merged["sections"] = {}
    for section, records in sections.items():
        ordered = [records[i] for i in sorted(records)]
        kind = KINDS[section]
        if kind.link is not None:  # speed-ups across shares
            objects = [kind.record(**r) for r in ordered]
            kind.link(objects)
            ordered = [as_dict(r) for r in objects]
        config = first["sections"][section]["config"]
        merged["sections"][section] = {"config": config, "records": ordered}
    missing = {s: points[s] - len(sections[s]) for s in sections}
    return Merged(merged, sorted(seen, key=lambda n: int(n.split("/")[0])), missing)


def _check_same_study(first_file: Path, first: dict, file: Path, doc: dict) -> None:
    """Refuse shares of different studies or of different splits, naming the first
    difference."""
    count, other = first["shard"]["count"], doc["shard"]["count"]
    if count != other:
        raise UsageError(f"{file}: a share of {other}, {first_file} of {count}: merge the "
                         "shares of one split")  # fmt: skip
    if first["config"].get("resolved_sha256") == doc["config"].get("resolved_sha256"):
        return
    configs = [{name: s["config"] for name, s in d["sections"].items()} for d in (doc, first)]
    difference = first_difference(*configs, f"in {first_file}")
    raise UsageError(f"{file}: another study ({difference})")
