"""A baseline built from the history, for compare's history mode: the head run is gated
against the recent runs of its own environment, not against one earlier run.

The run gated is left out of its own baseline when the history holds it already (added
before it was gated: a run compared with itself passes whatever it holds). The baseline's
rows are those of the most recent other run of the environment; each gated
timing gets the raw samples of the last `recent` runs that measured it, pooled, so the
gate's bootstrap sees the run-to-run spread the history has recorded as well as the
within-run noise. Everything else (exact metrics, statuses) is the latest run's. The
comparison then follows compare's own rules, with the same verdicts and exit codes.
"""

from __future__ import annotations

import json

from ..errors import UsageError
from ..measure.stats import Measurement
from ..records import flattened, gated_timing
from ..study.documents import Document, kinds_of
from ..study.sections import record_type
from .store import HistoryBackend, environment_id

#: Runs of the environment the baseline pools, most recent first.
RECENT_RUNS = 10


def _row_key(section: str, record: dict) -> tuple[str, str]:
    keys = kinds_of(section)
    return section, json.dumps(
        {k: v for k, v in record.items() if keys.get(k) and keys[k].value == "key"}, sort_keys=True
    )


def history_baseline(
    history: HistoryBackend, current: Document, label: str, recent: int = RECENT_RUNS
) -> Document:
    """The baseline `current` is gated against (see the module docstring); UsageError
    when the history holds no run of its environment and command, or `current` names no
    environment (a CSV), so that none could be said to be its own."""
    current.require_environment(
        "so no run of the history compares with it; gate the JSON results the command writes"
    )
    env_id = environment_id(current.environment)
    own = history.run_of(current)  # gated against itself, a run would pass whatever it holds
    runs = [
        r
        for r in history.runs()
        if r.environment_id == env_id and r.command == current.command and r.id != own
    ][-recent:]
    if not runs and own is not None:
        raise UsageError(
            f"{label}: holds this run (run {own}) and no other of its environment and "
            "command: a run is gated against the runs before it; gate it before adding it"
        )
    if not runs:
        raise UsageError(
            f"{label}: no run of this environment ({env_id}) and command "
            f"({current.command}) in the history; add some with "
            "`attnbench history add`"
        )
    rows: dict[tuple[str, str], dict] = {}
    pooled: dict[tuple[str, str], dict[str, list[float]]] = {}
    for run in runs:  # oldest first: the latest run's row wins
        for section, record in history.run_records(run.id):
            key = _row_key(section, record)
            rows[key] = dict(record)
            rtype = record_type(section)
            for metric, stats in (gated_timing(rtype) if rtype else {}).items():
                samples = record.get(stats.get("samples", "")) or []
                pooled.setdefault(key, {}).setdefault(metric, []).extend(samples)
    sections: dict[str, list[dict]] = {}
    for key, record in rows.items():
        section = key[0]
        rtype = record_type(section)
        for metric in gated_timing(rtype) if rtype else {}:
            samples = pooled.get(key, {}).get(metric)
            if samples and record.get(metric) is not None:
                record.update(flattened(rtype, metric, Measurement.of_samples(samples)))
        sections.setdefault(section, []).append(record)
    where = f"{label} (last {len(runs)} runs of environment {env_id})"
    return Document(where, current.command, sections, current.environment, None)
