"""A metric's history as series: one per environment and configuration (the record's
keys), each a value per commit, and the changes found in them.

A commit measured by several runs is one point: for a timing, the median and IQR of the
runs' raw samples pooled (or of their medians, where no samples were kept). Timing series
are searched for change points (history.changepoints); exact metrics change only when the
code's arithmetic does, so every commit where one differs from the one before is listed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import FieldError, typed
from ..measure.stats import Measurement
from ..model.files import shown_path
from ..records import Kind
from .store import DEFAULT_DB, Commit, HistoryBackend, StoredPoint, open_history

#: The environment of an exact metric's series: its values depend on the code alone.
ANY_ENVIRONMENT = "any"


@dataclass
class CommitValue:
    """One commit's point of a series."""

    commit: Commit
    median: float
    p25: float
    p75: float
    runs: int


@dataclass
class Series:
    """One metric over commits, in one environment, for one configuration."""

    metric: str
    kind: str
    section: str
    environment_id: str
    environment: dict
    keys: dict
    values: list[CommitValue] = field(default_factory=list)

    def label(self, varying: Sequence[str]) -> str:
        """The keys that tell this series from the others shown with it (`varying`), but
        for those it does not set (None)."""
        return " ".join(f"{k}={self.keys[k]}" for k in varying if self.keys.get(k) is not None)


@dataclass(frozen=True)
class Change:
    """A change of a series at one commit. `low_pct`/`high_pct` bound its size (a 95%
    interval; None for an exact metric, whose change is certain)."""

    series: Series
    commit: Commit
    before: float
    after: float
    change_pct: float
    low_pct: float | None = None
    high_pct: float | None = None


def parse_where(text: str | None) -> dict[str, set[str]]:
    """'variant=MHA,variant=MQA,prompt_len=2048' as {key: the values it may have, as
    text}: a key given twice matches either value."""
    where: dict[str, set[str]] = {}
    parts = [p.strip() for p in text.split(",")] if text and text.strip() else []
    for part in parts:  # an empty pair ('a=1,,b=2') is refused, as an axis' empty value is
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise FieldError(
                "where",
                typed(text or ""),
                "expected key=value pairs, comma-separated, e.g. variant=GQA-8,prompt_len=2048",
            )
        where.setdefault(key.strip(), set()).add(value.strip())
    return where


def matches(keys: dict, where: dict[str, set[str]]) -> bool:
    """Every `where` key is among `keys`, with one of its values (as text)."""
    return all(k in keys and _text(keys[k]) in values for k, values in where.items())


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def build_series(
    metric: str, points: Sequence[StoredPoint], where: dict[str, set[str]]
) -> list[Series]:
    """The series of `metric` among `points` (ordered by commit) whose keys match `where`."""
    grouped: dict[tuple, tuple[Series, dict[str, list[StoredPoint]]]] = {}
    for point in points:
        if point.value is None or not matches(point.keys, where):
            continue
        exact = point.kind == Kind.EXACT.value  # the same in every environment
        env_id, env = (
            (ANY_ENVIRONMENT, {}) if exact else (point.run.environment_id, point.run.environment)
        )
        key = (env_id, point.section, json.dumps(point.keys, sort_keys=True))
        if key not in grouped:
            series = Series(metric, point.kind, point.section, env_id, env, point.keys)
            grouped[key] = (series, {})
        grouped[key][1].setdefault(point.run.commit.sha, []).append(point)
    found = []
    for series, by_commit in grouped.values():
        series.values = [_commit_value(p) for p in by_commit.values()]
        found.append(series)
    return found


def _commit_value(points: list[StoredPoint]) -> CommitValue:
    """The commit's runs pooled: their samples, or their values where they kept none."""
    pooled = [s for p in points for s in (p.samples or [])]
    measured = Measurement.of_samples(pooled or [p.value for p in points if p.value is not None])
    commit = points[-1].run.commit
    return CommitValue(commit, measured.median_ms, measured.p25_ms, measured.p75_ms, len(points))


@dataclass
class Search:
    """What searching some series found: their changes, and what it left out, in notes."""

    changes: list[Change] = field(default_factory=list)
    #: The commits of each timing metric whose median is 0, left out of its search.
    zeros: dict[str, list[Commit]] = field(default_factory=dict)
    #: Timing series of too few commits for the test to find a change in.
    short: int = 0

    def notes(self) -> list[str]:
        """What the search left out, a line each, for under its findings."""
        notes = [_zeros_note(metric, commits) for metric, commits in self.zeros.items()]
        if self.short:
            from .changepoints import ALPHA, fewest_values  # numpy, as the search had

            notes.append(
                f"{self.short} series of under {fewest_values()} commits: too few to find "
                f"a change in at p < {ALPHA:g}"
            )
        return notes


def search_changes(series: Sequence[Series]) -> Search:
    """The changes of every one of `series`, series by series: change points of a timing
    (_search_timing), every change of an exact metric; none for other kinds."""
    found = Search()
    for s in series:
        if s.kind == Kind.EXACT.value:
            found.changes += _exact_changes(s)
        elif s.kind == Kind.TIMING.value:
            _search_timing(s, found)
    return found


def _exact_changes(series: Series) -> list[Change]:
    """Every commit where an exact metric differs from the commit before."""
    steps = zip(series.values, series.values[1:], strict=False)
    return [
        Change(series, now.commit, before.median, now.median, _pct(before.median, now.median))
        for before, now in steps
        if now.median != before.median
    ]


def _search_timing(series: Series, found: Search) -> None:
    """The change points of a timing series, added to `found`. The search runs on the
    logarithms of the medians, which a median of 0 (an earlier attnbench stored some)
    has none of: such a commit is left out, and `found` keeps it for a note, rather than
    the whole series going unsearched without a word. A series of fewer commits than the
    test can find a change in (changepoints.fewest_values) is not searched: `found`
    counts it for a note, where "no change" would read as none there."""
    from .changepoints import change_points, fewest_values  # numpy: only the search needs it

    values = [v for v in series.values if v.median > 0]
    if len(values) < len(series.values):
        zeros = [v.commit for v in series.values if v.median <= 0]
        found.zeros.setdefault(series.metric, []).extend(zeros)
    if len(values) < fewest_values():
        found.short += 1
        return
    found.changes += [
        Change(
            series,
            values[c.index].commit,
            c.before,
            c.after,
            c.change_pct,
            c.ci_low_pct,
            c.ci_high_pct,
        )
        for c in change_points([v.median for v in values])
    ]


def _zeros_note(metric: str, commits: Sequence[Commit]) -> str:
    """The note of the commits of `metric` left out of its search (_search_timing)."""
    shas = list(dict.fromkeys(c.sha[:10] for c in commits))
    listed = ", ".join(shas[:3]) + (f" and {len(shas) - 3} more" if len(shas) > 3 else "")
    return (
        f"{metric}: {len(commits)} point(s) of 0 ms left out of the search for changes, "
        f"which compares timings by their ratios (commit {listed})"
    )


def _pct(before: float, after: float) -> float:
    return 100 * (after / before - 1) if before else math.inf


def by_environment(series: Sequence[Series]) -> dict[str, list[Series]]:
    """`series` grouped by environment (shown and drawn one environment at a time), in
    the order their environments first come."""
    grouped: dict[str, list[Series]] = {}
    for s in series:
        grouped.setdefault(s.environment_id, []).append(s)
    return grouped


def followed(kinds: Mapping[str, str]) -> list[str]:
    """Of the metrics of a history (by kind), those searched for changes unless named:
    every gated timing (a median, not its other statistics) and every exact metric."""
    return [
        metric
        for metric, kind in kinds.items()
        if kind == Kind.EXACT.value or (kind == Kind.TIMING.value and metric.endswith("_median"))
    ]


def find_series(db: str | None, metric: str, where: str | None) -> list[Series]:
    """The series of `metric` in the history at `db` (the default one when None) whose
    keys match `where` (parse_where); FieldError when there are none."""
    history = open_history(db)
    try:
        return _series_of(history, history.metric_kinds(), metric, where)
    finally:
        history.close()


def _series_of(
    history: HistoryBackend, kinds: Mapping[str, str], metric: str, where: str | None
) -> list[Series]:
    """find_series in an open history, whose metrics are `kinds` (metric_kinds)."""
    if metric not in kinds:
        known = ", ".join(k for k, kind in kinds.items() if kind in ("timing", "exact"))
        raise FieldError(
            "metric", typed(metric), f"not in the history; it holds {known or 'no runs'}"
        )
    found = build_series(metric, history.points(metric), parse_where(where))
    if not found and where is None:
        raise FieldError("metric", typed(metric), "no run in the history has a value of it")
    if not found:
        raise FieldError("where", typed(where), f"no series of {metric} matches")
    return found


def find_changes(
    db: str | None, metrics: Sequence[str], where: str | None
) -> tuple[list[str], Search]:
    """The metrics searched and the search of their series matching `where`: of every
    metric in `metrics` (each must have a series), else of every followed one that has
    some. FieldError when the history holds no runs, or `where` matches nothing. The
    history is opened once (each opening checks the whole file: SqliteHistory)."""
    history = open_history(db)
    try:
        kinds = history.metric_kinds()
        if not kinds:
            shown = shown_path(DEFAULT_DB if db is None else db)
            raise FieldError("db", shown, "holds no runs; add some with `attnbench history add`")
        wanted = list(metrics) or followed(kinds)
        found: list[Series] = []
        for name in wanted:  # every metric named; of the others, those with a series
            if metrics:
                found += _series_of(history, kinds, name, where)
            else:
                found += _series_or_none(history, kinds, name, where)
    finally:
        history.close()
    if not found and where is not None:  # a where that matches nothing finds no change
        raise FieldError("where", typed(where), "no series of any metric matches")
    return wanted, search_changes(found)


def _series_or_none(
    history: HistoryBackend, kinds: Mapping[str, str], metric: str, where: str | None
) -> list[Series]:
    try:
        return _series_of(history, kinds, metric, where)
    except FieldError:
        return []
