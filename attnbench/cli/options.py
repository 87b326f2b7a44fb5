"""Every flag and argument of the command line, declared here and one way: an `Annotated`
type made by `flag` (or `argument`), which a command names as a parameter's type, its
default after `=`. A section's fields become flags the same way (`field_flag`: named after
the field, with the schema's help); the gate's thresholds take their defaults and help
from `gate.rules.Thresholds`. A flag several commands share, or that differs between
them in its help alone (--device, --quiet), is declared once."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from ..gate import baseline
from ..gate.rules import Thresholds
from ..history.store import DEFAULT_DB
from ..study.limits import MAX_POINTS
from ..study.schema import DEVICE_CHOICES, FIELDS
from .flags import flag_of


def flag(kind: Any, *names: str, help: str, metavar: str | None = None, **more: Any) -> Any:
    """A flag of type `kind` ('str | None', 'bool'...) called `names`, with its help."""
    return Annotated[kind, typer.Option(*names, help=help, metavar=metavar, **more)]


def argument(kind: Any, help: str, metavar: str | None = None) -> Any:
    """An argument of type `kind`, with its help (named by `metavar` in the usage)."""
    return Annotated[kind, typer.Argument(help=help, metavar=metavar)]


#: A field's value in the help: its type's, and ',...' for an axis (a list).
METAVARS = {int: "INT", float: "NUM"}


#: What a field's flag takes, where its name says more than its type's TEXT.
FIELD_METAVARS = {
    "calibration": "PATH",
    "device": "DEVICE",
    "memory": "SIZE",
    "reserve": "SIZE",
    "tpot": "TIME",
    "ttft": "TIME",
}


def field_flag(section: str, name: str, alias: str | None = None) -> inspect.Parameter:
    """The flag of field `name` in `section`'s command, with the field's help for that
    section, as a keyword parameter (None when not given); with `alias`, a hidden flag
    under the field's old name."""
    spec, names = FIELDS[name], flag_of(alias or name)
    help = spec.help_text(section, flag_of)
    if spec.type is bool:
        kind = flag(bool | None, f"{names}/--no-{names[2:]}", help=help)
    else:
        named = FIELD_METAVARS.get(name) or METAVARS.get(spec.type, "TEXT")
        metavar = named + (",..." if spec.axis else "")
        kind = flag(str | None, names, help=help, metavar=metavar, hidden=alias is not None)
    return inspect.Parameter(
        alias or name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind
    )


def quiet_flag(help: str = "Print only errors.") -> Any:
    """--quiet (-q): print less; `help` says what is still printed."""
    return flag(bool, "--quiet", "-q", help=help)


def device_flag(overrides: str | None = None) -> Any:
    """--device: where to run, over what the `overrides` (a file, a study) says."""
    over = f" (overrides the {overrides})." if overrides else "."
    return flag(str | None, "--device", help=f"{DEVICE_CHOICES}{over}")


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"attnbench {__version__}")
        raise typer.Exit()


VersionOpt = flag(
    bool, "--version", callback=_version, is_eager=True, help="Print the version and exit."
)

# The outputs and inputs of the commands of one section (params, kvmem, decode-speed, fit,
# predict).
ConfigOpt = flag(str | None, "--config", help="YAML sweep file; flags override it.", metavar="PATH")
ModelOpt = flag(
    str | None,
    "--model",
    metavar="NAME",
    help="A model preset (see `attnbench models`), case-insensitive.",
)
HfConfigOpt = flag(
    str | None, "--hf-config", help="Path to a Hugging Face config.json.", metavar="PATH"
)
CsvOpt = flag(str | None, "--csv", help="Write the records as CSV here.", metavar="PATH")
JsonOpt = flag(
    str | None, "--json", help="Write records, config and environment as JSON.", metavar="PATH"
)
QuietOpt = quiet_flag()
WideOpt = flag(bool, "--wide", help="Show every column, wider than the terminal if need be.")

# predict's modes on a measured run.
CalibrateOpt = flag(
    str | None,
    "--calibrate",
    help="Fit the efficiencies and the overhead per step to a measured decode-speed or "
    "study results.json, against --gpu's peaks (default: the peaks the run measured), "
    "and write them to --to.",
    metavar="RESULTS.json",
)
CheckOpt = flag(
    str | None,
    "--check",
    help="Print predicted against measured for every timed row of a results.json, with "
    "--calibration's model (default: the stated defaults), and the median error.",
    metavar="RESULTS.json",
)
CalibrationToOpt = flag(
    str | None,
    "--to",
    help="Where --calibrate writes the calibration (default: beside RESULTS.json, as "
    "RESULTS.calibration.json).",
    metavar="PATH",
)
MinTimeOpt = flag(
    str | None,
    "--min-time",
    help="--calibrate and --check: only the samples measured at this time or more, e.g. "
    "1ms (default: all).",
    metavar="TIME",
)

#: The gate's thresholds when no flag sets them.
GATE = Thresholds()


def percent(fraction: float) -> str:
    """A fraction as a threshold flag takes it: 0.1 -> '10%'."""
    return f"{fraction * 100:g}%"


#: The defaults of the threshold flags, as they are typed.
TIME_THRESHOLD = percent(GATE.time)
MEM_THRESHOLD = percent(GATE.mem)
COUNT_THRESHOLD = percent(GATE.count)
# Each flag's default is stated in its help by cli.group.plain_help, as typer holds it.
TIME_HELP = "Smallest timing change that counts."
MEM_HELP = f"Measured-memory change that counts, and at least {GATE.mem_floor_bytes / 2**20:g} MiB."
COUNT_HELP = "Instruction-count change that counts, either way; counts are near-exact."

TimeThresholdOpt = flag(str, "--time-threshold", metavar="PERCENT", help=TIME_HELP)
MemThresholdOpt = flag(str, "--mem-threshold", metavar="PERCENT", help=MEM_HELP)
CountThresholdOpt = flag(str, "--count-threshold", metavar="PERCENT", help=COUNT_HELP)

#: The baseline CI gates every change against (`attnbench baseline exact`), as typed.
EXACT_BASELINE = str(baseline.EXACT_BASELINE)

#: The formats of a comparison's report (compare, ab).
FORMATS = ("table", "markdown", "json")
FORMAT_HELP = f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}."
FormatOpt = flag(str, "--format", metavar="FORMAT", help=FORMAT_HELP)
OutputOpt = flag(str | None, "--output", metavar="PATH", help="Write the report here.")

FORCE_HELP = (
    "Write into --out even when it holds files that are not a study's (those "
    "of the same names as the study's are replaced)."
)
ForceOpt = flag(bool, "--force", help=FORCE_HELP)
#: The sweep file of a study, given as an argument.
ConfigArg = argument(str | None, "Sweep file (default: the packaged default study).")
#: The same file as a flag, as every other command takes it.
RunConfigOpt = flag(str | None, "--config", help="The sweep file, as CONFIG.", metavar="PATH")

# compare and baseline.
BaselineArg = argument(
    str,
    "Baseline results (JSON from --json, or CSV); with --history, the current ones.",
    metavar="BASELINE",
)
CurrentArg = argument(str | None, "Current results of the same command.", metavar="CURRENT")
HistoryOpt = flag(
    str | None,
    "--history",
    metavar="DB",
    help="Gate the one results file given against the recent runs of its environment "
    "in this history database (attnbench history add), not against one baseline.",
)
FailOnImprovementOpt = flag(
    bool, "--fail-on-improvement", help="Fail on improvements too (refresh the baseline)."
)
FailOnMissingOpt = flag(
    bool,
    "--fail-on-missing",
    help="Fail when a row of the baseline is missing from the current (a run cut short).",
)
AllowEnvMismatchOpt = flag(
    bool, "--allow-env-mismatch", help="Show timings from differing environments, ungated."
)
ShowAllOpt = flag(
    bool,
    "--all",
    help="List the unchanged findings too (the table and markdown count them; json "
    "lists every finding).",
)
OnlyChangedOpt = flag(
    bool, "--only-changed", hidden=True, help="Leave the unchanged findings out of json too."
)
SavedResultsArg = argument(str, "JSON written by --json.", metavar="RESULTS.json")
BaselineToOpt = flag(
    str | None,
    "--to",
    metavar="PATH",
    help=f"Where to write it (default {baseline.BASELINE_DIR}/<name>.json: a study's by "
    "its sweep file, default.json for the default study; another file by its own name).",
)
ExactToOpt = flag(str, "--to", metavar="PATH", help="Where to write the baseline.")

# ab.
StudyArg = argument(str, "Sweep file: its decode points are timed.", metavar="STUDY.yaml")
BaseOpt = flag(
    str, "--base", metavar="REV", help="The revision to gate against: a git revision here."
)
HeadOpt = flag(
    str | None, "--head", metavar="REV", help="The revision to gate (default: see --head-dir)."
)
HeadDirOpt = flag(
    str | None,
    "--head-dir",
    metavar="DIR",
    help="A source tree to gate, as it is on disk (default: this working tree).",
)
RoundsOpt = flag(
    str,
    "--rounds",
    metavar="INT",
    help="Rounds of ABBA visits of each point (two pairs each; at most 10,000).",
)
VisitTimeOpt = flag(
    str, "--visit-time", metavar="S", help="Seconds of sampling per visit at the most."
)
ThresholdOpt = flag(str, "--threshold", metavar="PERCENT", help=TIME_HELP)
ThreadsOpt = flag(
    str | None,
    "--threads",
    metavar="INT",
    help="torch threads of each side (default: the study's, or torch's).",
)
StudyDeviceOpt = device_flag("study")
CacheDirOpt = flag(
    str | None,
    "--cache-dir",
    metavar="DIR",
    help="Worktrees and venvs of the sides (default $XDG_CACHE_HOME/attnbench/ab, "
    "else ~/.cache/attnbench/ab).",
)
LogsOpt = flag(
    str | None, "--out", metavar="DIR", help="The workers' logs (default results/ab-<time>/)."
)
ReplaceLogsOpt = flag(
    bool, "--force", help="Replace base.log and head.log where --out holds them already."
)
AbJsonOpt = flag(
    str | None, "--json", metavar="PATH", help="Write the comparison and every visit as JSON."
)
AbFailOnImprovementOpt = flag(bool, "--fail-on-improvement", help="Fail on improvements too.")
ReportQuietOpt = quiet_flag("Print only the report and errors.")

# run, plot, report, merge.
RunOutOpt = flag(str | None, "--out", help="Results directory (default results/<time>/).")
ResumeOpt = flag(bool, "--resume", help="Finish the study already started in --out.")
DryRunOpt = flag(bool, "--dry-run", help="List the points and a time estimate; run nothing.")
FileDeviceOpt = device_flag("file")
MaxPointsOpt = flag(
    str | None,
    "--max-points",
    metavar="INT",
    help=f"Refuse a study of more points than this, 1 to {MAX_POINTS:,} (default "
    f"{MAX_POINTS:,}: a run rewrites its results.json after every point, and a larger "
    "study takes days).",
)
NprocOpt = flag(
    str | None,
    "--nproc",
    metavar="N",
    help="With --dry-run: share the points among N ranks and print each one's share.",
)
ShardOpt = flag(
    str | None,
    "--shard",
    metavar="i/N",
    help="Run share i of N (from 0) into --out DIR/shards/; `attnbench merge DIR` "
    "puts the shares together.",
)
ResultsArg = argument(str, "A results.json written by `attnbench run`.")
BesideOutOpt = flag(str | None, "--out", help="Directory to write into (default: beside it).")
DirsArg = argument(list[str], "Study directories (their shards/*/) or share directories.")
MergeOutOpt = flag(
    str | None, "--out", help="Directory to write into (default: the first directory)."
)

# models, env, selfcheck.
#: --device of the commands that look at one device.
DeviceOpt = device_flag()
SourceWideOpt = flag(bool, "--wide", help="Show every column (the source too).")

# history.
HISTORY_FORMATS = ("table", "markdown")
DbOpt = flag(
    str | None, "--db", metavar="PATH", help=f"The history database (default {DEFAULT_DB})."
)
MetricOpt = flag(str, "--metric", metavar="NAME", help="The metric to follow.")
MetricsOpt = flag(
    list[str],
    "--metric",
    metavar="NAME",
    help="Metrics to search (default: every timing and exact metric).",
)
WhereOpt = flag(
    str | None,
    "--where",
    metavar="KEY=VALUE,...",
    help="Only series whose keys match: variant=GQA-8,prompt_len=2048; a key given twice "
    "matches either value: variant=MHA,variant=MQA.",
)
ResultsFilesArg = argument(list[str], "Results files to add, one or more.", metavar="RESULTS.json")
CommitOpt = flag(
    str | None,
    "--commit",
    metavar="REV",
    help="The commit measured, a revision of the checkout here (HEAD~3, a tag) filed as its sha "
    "(default: the file's git_commit, else HEAD of the current checkout).",
)
BranchOpt = flag(
    str | None,
    "--branch",
    metavar="NAME",
    help="Its branch (default: HEAD's, for a run of HEAD's commit).",
)
DateOpt = flag(
    str | None,
    "--date",
    metavar="DATE",
    help="Its date, ISO 8601 (default: when the file was written; else HEAD's commit date).",
)
AnyWidthOpt = flag(bool, "--wide", help="Every column, whatever the width.")
PictureOpt = flag(str, "--out", metavar="PATH", help="The picture to write (.png, .svg, .pdf).")
HistoryFormatOpt = flag(str, "--format", metavar="FORMAT", help=f"{' or '.join(HISTORY_FORMATS)}.")
