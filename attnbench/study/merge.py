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
from typing import Any

from ..errors import UsageError, one_line, spelled
from ..model.files import shown_path
from .documents import PARTS_SECTION, load_results
from .limits import MAX_POINTS, MAX_SHARDS
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
        checked_share(file, doc)
        _check_same_study(first_file, first, file, doc)
        _check_same_points(first_file, first, file, doc)
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
            else:  # measured twice (shares of other counts overlap): which one holds?
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
        indices = checked_share(own, load_results(own))["indices"]
        wanted = {(section, i) for section, found in indices.items() for i in found}
        return indexed_plan(plan, shard, [t for t in plan.tasks if (t.section, t.index) in wanted])
    done: dict[str, set[int]] = {}
    for file in sorted((out_dir / SHARDS_DIR).glob(f"*/{RESULTS_FILE}")):
        doc = load_results(file)
        other = checked_share(file, doc)["count"] != shard.count
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


def _check_same_points(first_file: Path, first: dict, file: Path, doc: dict) -> None:
    """Shares of one study count the same points in each section (an edited file does not)."""
    points, first_points = doc["shard"]["points"], first["shard"]["points"]
    if points != first_points:
        raise UsageError(
            f"{shown_path(file)}: shard.points {spelled(points)}: "
            f"{shown_path(first_file)} has {spelled(first_points)}, and the shares of "
            "one study count the same points"
        )


def checked_share(file: Path, doc: dict) -> dict:
    """The `shard` block of `doc`, the results.json `file` of a share, checked whole (a
    UsageError naming the file and the first bad field otherwise): merging and resuming
    place every record by it. Its index and count; per section, the study's number of
    `points`, and the `indices` in the study of the points given to this share, each a
    point of the study, once, and no fewer than the records it holds (a share stopped
    part-way holds fewer)."""
    about = doc.get("shard")
    if about is None:
        raise UsageError(
            f"{shown_path(file)}: not a share of a study (a whole study, run unshared)"
        )
    if not isinstance(about, dict):
        raise _bad(file, "shard", about, "expected an object (which share this is)")
    count = _integer(file, about, "count", 1, MAX_SHARDS)
    _integer(file, about, "index", 0, count - 1)
    sections = doc["sections"]
    points = _per_section(file, about, "points", sections)
    indices = _per_section(file, about, "indices", sections)
    for name, body in sections.items():
        _entry(file, body, "config", f"sections.{name}")
        total = _integer(file, points, name, 1, MAX_POINTS, "shard.points")
        _check_indices(file, name, indices[name], total, len(body["records"]))
    return about


def _bad(file: Path, field: str, value: Any, why: str) -> UsageError:
    return UsageError(f"{shown_path(file)}: {field} {spelled(value)}: {why}")


def _entry(file: Path, block: dict, key: str, at: str) -> Any:
    """`block[key]`; a UsageError naming `at.key` when it is missing."""
    if key not in block:
        raise UsageError(f"{shown_path(file)}: {at}.{key}: missing")
    return block[key]


def _integer(file: Path, block: dict, key: str, low: int, high: int, at: str = "shard") -> int:
    """`block[key]`, an integer from `low` to `high` (not true or false, not 1.0)."""
    value = _entry(file, block, key, at)
    if type(value) is not int or not low <= value <= high:
        raise _bad(file, f"{at}.{key}", value, f"expected an integer from {low:,} to {high:,}")
    return value


def _per_section(file: Path, about: dict, key: str, sections: dict) -> dict:
    """`about[key]`, an object with an entry for each of the share's `sections`, no other."""
    value = _entry(file, about, key, "shard")
    if not isinstance(value, dict):
        raise _bad(file, f"shard.{key}", value, "expected an object with an entry per section")
    for name in sections:
        _entry(file, value, name, f"shard.{key}")
    for name in value:
        if name not in sections:
            raise UsageError(
                f"{shown_path(file)}: shard.{key}.{one_line(str(name), 40)}: names no section "
                f"of the share (its sections: {', '.join(sections)})"
            )
    return value


def _check_indices(file: Path, section: str, indices: Any, points: int, records: int) -> None:
    """The indices in the study of a section's points given to the share: each a point of
    the study (0 to `points` - 1), once; at least as many as its `records`."""
    at = f"shard.indices.{section}"
    if not isinstance(indices, list):
        raise _bad(file, at, indices, "expected a list of the share's points in the study")
    seen: dict[int, int] = {}
    for k, index in enumerate(indices):
        if type(index) is not int or not 0 <= index < points:
            why = f"expected an integer from 0 to {points - 1:,} (the section's points)"
            raise _bad(file, f"{at}[{k}]", index, why)
        if index in seen:
            raise _bad(file, f"{at}[{k}]", index, f"the same point as {at}[{seen[index]}]")
        seen[index] = k
    if records > len(indices):
        raise UsageError(
            f"{shown_path(file)}: sections.{section}: holds {records:,} records, but "
            f"{at} lists {len(indices):,} point{'s' * (len(indices) != 1)}"
        )
