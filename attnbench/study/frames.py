"""Results files as pandas DataFrames: one per section, its columns those of the section's
CSV, and the kind each column's field declares. pandas is an optional extra, imported
only here: `pip install 'attnbench[pandas]'`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..records import csv_fields, field_kinds
from .documents import load_document
from .sections import record_type
from .stores import RESULTS_FILE

if TYPE_CHECKING:
    import pandas as pd


def load_frames(path: str | Path, samples: bool = False) -> dict[str, pd.DataFrame]:
    """Load a results file into one pandas DataFrame per section: `{section: frame}`.

    `path` is a results.json written by `attnbench run`, a study's directory (its
    results.json), or the JSON a single command writes (`params`,
    `kvmem`, `decode-speed`, `fit`; `params` of a model also writes its `model_parts`).
    The file is read and validated as every command reads it; a file attnbench did not
    write raises `attnbench.errors.UsageError`, whose message is one line.

    Each frame has a row per record and the columns of the section's CSV, in the same
    order: every field of the section's record type. The raw samples of timings and
    ratios (`samples_ms`, `x_of_narrowest_samples`...: one list of numbers per row) are
    JSON only and left out, unless `samples=True`, which keeps them as list columns in
    their field's place. A field the records lack (a file of an earlier version) is an
    empty column; a value no field declares is not read.

    `frame.attrs["kinds"]` maps each column to the kind its field declares: `"key"`
    (an input of the sweep: rows are matched on the keys), `"exact"`, `"memory"`,
    `"timing"`, `"ratio"`, `"count"` or `"info"` (see `attnbench.records`). The key
    columns of a frame are `[c for c, k in frame.attrs["kinds"].items() if k == "key"]`.

    Raises ImportError when pandas is not installed."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("load_frames needs pandas: pip install 'attnbench[pandas]'") from None
    file = Path(path)
    document = load_document(file / RESULTS_FILE if file.is_dir() else file)
    frames = {}
    for section, records in document.sections.items():
        rtype = record_type(section)
        kinds = field_kinds(rtype)
        in_csv = set(csv_fields(rtype))
        columns = [name for name in kinds if samples or name in in_csv]
        rows = [[record.get(name) for name in columns] for record in records]
        frame = pd.DataFrame(rows, columns=columns)
        frame.attrs["kinds"] = {name: kinds[name].value for name in columns}
        frames[section] = frame
    return frames
