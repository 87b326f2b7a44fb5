"""Options several commands share, declared once as `Annotated` types; the gate's
thresholds as flags, their defaults and help read from `gate.rules.Thresholds`."""

from __future__ import annotations

from typing import Annotated

import typer

from ..gate import baseline
from ..gate.rules import Thresholds

#: The gate's thresholds when no flag sets them.
GATE = Thresholds()


def percent(fraction: float) -> str:
    """A fraction as a threshold flag takes it: 0.1 -> '10%'."""
    return f"{fraction * 100:g}%"


#: The defaults of the threshold flags, as they are typed.
TIME_THRESHOLD = percent(GATE.time)
MEM_THRESHOLD = percent(GATE.mem)
COUNT_THRESHOLD = percent(GATE.count)
TIME_HELP = f"Smallest timing change that counts, e.g. {TIME_THRESHOLD}."
MEM_HELP = f"Measured-memory change that counts (at least {GATE.mem_floor_bytes / 2**20:g} MiB)."
COUNT_HELP = "Instruction-count change that counts, either way (counts are near-exact)."

TimeThresholdOpt = Annotated[
    str, typer.Option("--time-threshold", metavar="PERCENT", help=TIME_HELP)
]
MemThresholdOpt = Annotated[str, typer.Option("--mem-threshold", metavar="PERCENT", help=MEM_HELP)]
CountThresholdOpt = Annotated[
    str, typer.Option("--count-threshold", metavar="PERCENT", help=COUNT_HELP)
]

#: The baseline CI gates every change against (`attnbench baseline exact`), as typed.
EXACT_BASELINE = str(baseline.EXACT_BASELINE)

#: The formats of a comparison's report (compare, ab).
FORMATS = ("table", "markdown", "json")
FORMAT_HELP = f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}."
FormatOpt = Annotated[str, typer.Option("--format", metavar="FORMAT", help=FORMAT_HELP)]
OutputOpt = Annotated[
    str | None, typer.Option("--output", metavar="PATH", help="Write the report here.")
]

QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only errors.")]
FORCE_HELP = (
    "Write into --out even when it holds files that are not a study's (those "
    "of the same names as the study's are replaced)."
)
ForceOpt = Annotated[bool, typer.Option("--force", help=FORCE_HELP)]
#: The sweep file of a study, given as an argument.
ConfigArg = Annotated[
    str | None, typer.Argument(help="Sweep file (default: the packaged default study).")
]
