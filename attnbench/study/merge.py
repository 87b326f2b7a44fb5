"""Putting the shares of a study back together: every share's records in the study's
point order, one document, as if one worker had run it all.

The shares must come from the same study (the same resolved configuration). They may
come from several splits (i/N with different N: a study resumed with another number of
ranks shares out only what no earlier share recorded); a point recorded twice is kept
once, but two shares of one split that both hold it are refused. Speed-ups that link rows
of different shares are filled in again over the merged records.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..model.files import shown_path
from .documents import PARTS_SECTION, load_results
from .plan import Plan, first_difference
from .shards import SHARDS_DIR, Shard, indexed_plan, shard_dir, shard_plan
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
        try:
            if (path / RESULTS_FILE).is_file() and not (path / SHARDS_DIR).is_dir():
                found.append(path / RESULTS_FILE)
                continue
            shares = sorted((path / SHARDS_DIR).glob(f"*/{RESULTS_FILE}"))
        except OSError as exc:  # a name too long to look up
            raise UsageError(f"{shown_path(path)}: cannot read it ({exc.strerror})") from None
        if not shares:
            raise UsageError(
                f"{shown_path(path)}: no shares of a study here (no {SHARDS_DIR}/*/{RESULTS_FILE})"
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
    holder: dict[tuple[str, int], str] = {}  # the share each point was taken from
    ran_on: dict[tuple[str, int], int] = {}  # the index of that share's environment
    seen: dict[str, str] = {}
    for number, (file, doc) in enumerate(docs):
        shard = doc["shard"]
        name = f"{shard['index']}/{shard['count']}"
        if name in seen:
            raise UsageError(f"{file}: share {name} is also in {seen[name]}")
        seen[name] = str(file)
        for section, index, record in recorded(doc):
            earlier = holder.get((section, index))
            if earlier is None:
                sections[section][index] = record
                holder[section, index] = name
                ran_on[section, index] = number
            elif earlier.split("/")[1] == str(shard["count"]):
                raise UsageError(f"{file}: {section} point {index} is also in share {earlier}")
    points = first["shard"]["points"]
    merged = {k: v for k, v in first.items() if k not in ("shard", "sections", PARTS_SECTION)}
    merged["environments"] = [
        {"shard": f"{d['shard']['index']}/{d['shard']['count']}", **d["environment"]}
        for _, d in docs
    ]
    merged["sections"] = {}
    for section, records in sections.items():
        ordered = [records[i] for i in sorted(records)]  # comparisons stay each share's
        config = first["sections"][section]["config"]
        ran = [ran_on[section, i] for i in sorted(records)]
        merged["sections"][section] = {"config": config, "records": ordered, "environment_of": ran}
    parts = next((doc[PARTS_SECTION] for _, doc in docs if PARTS_SECTION in doc), None)
    if parts is not None:  # every share makes them from the study's models: one's will do
        merged[PARTS_SECTION] = parts
    missing = {s: points[s] - len(sections[s]) for s in sections}
    names = sorted(seen, key=lambda n: (int(n.split("/")[1]), int(n.split("/")[0])))
    return Merged(merged, names, missing)


def recorded(doc: dict) -> Iterator[tuple[str, int, dict]]:
    """(section, index in the study, record) of every point a share recorded: its k-th
    record of a section is the k-th of the points it was given."""
    indices = doc["shard"]["indices"]
    for section, body in doc["sections"].items():
        yield from (
            (section, i, r) for i, r in zip(indices[section], body["records"], strict=False)
        )


def resumed_share_plan(plan: Plan, shard: Shard, out_dir: Path) -> Plan:
    """The plan of share `shard` of the study in `out_dir`, resumed perhaps with another
    number of shares than it started with. A share that has started keeps the points
    stored with it; a new one takes its share of the points no share of another split
    (of this study) has recorded. The shares of one split read the same files, which no
    one writes while they run, so they agree without talking."""
    own = shard_dir(out_dir, shard) / RESULTS_FILE
    if own.is_file():
        indices = load_results(own).get("shard", {}).get("indices", {})
        wanted = {(section, i) for section, found in indices.items() for i in found}
        return indexed_plan(plan, shard, [t for t in plan.tasks if (t.section, t.index) in wanted])
    done: dict[str, set[int]] = {}
    for file in sorted((out_dir / SHARDS_DIR).glob(f"*/{RESULTS_FILE}")):
        doc = load_results(file)
        other = doc.get("shard", {}).get("count") != shard.count
        if other and doc["config"].get("resolved_sha256") == plan.resolved_sha256:
            for section, index, _ in recorded(doc):
                done.setdefault(section, set()).add(index)
    return shard_plan(plan, shard, done)


def _check_same_study(first_file: Path, first: dict, file: Path, doc: dict) -> None:
    """Refuse shares of different studies, naming the first difference."""
    if first["config"].get("resolved_sha256") == doc["config"].get("resolved_sha256"):
        return
    configs = [{name: s["config"] for name, s in d["sections"].items()} for d in (doc, first)]
    difference = first_difference(*configs, f"in {first_file}")
    raise UsageError(f"{file}: another study ({difference})")
