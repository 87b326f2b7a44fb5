"""`attnbench run`, `plot` and `report`: a whole study from one sweep file, and its plots
and report re-rendered from a saved results.json."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import FieldError, UsageError, one_line
from ..model.files import bad_name, dangling_folder, refuse_empty, shown_path
from ..study.limits import MAX_POINTS, MAX_SHARDS
from ..study.output import keep_records, kept_text
from ..study.saved import unsaved
from ..study.schema import INT_TEXT
from .common import (
    EXIT_INTERRUPTED,
    console,
    err_console,
    handles_errors,
    print_items,
    progress_iter,
    same_file,
    stop_notice,
    timestamped_dir,
)
from .group import app, standard_output_failed
from .options import (
    BesideOutOpt,
    ConfigArg,
    DirsArg,
    DryRunOpt,
    FileDeviceOpt,
    ForceOpt,
    MaxPointsOpt,
    MergeOutOpt,
    NprocOpt,
    QuietOpt,
    ResultsArg,
    ResumeOpt,
    RunConfigOpt,
    RunOutOpt,
    ShardOpt,
    flag,
)

if TYPE_CHECKING:
    from ..study.distributed import Launch
    from ..study.merge import Merged
    from ..study.runner import DirectoryStore, Plan, RunResult, Task
    from ..study.shards import Shard

#: Where this module's commands come in `attnbench --help`, and each one's line there
#: (cli/__init__.py).
ORDER = 10
SHORT_HELP = {
    "run": "Run a sweep file's sections; write results, plots, report",
    "plot": "Re-draw a study's plots from its results.json",
    "report": "Re-write a study's report.md from its results.json",
    "merge": "Put the shares of a sharded study back together",
}

#: --force of the commands that write a study's files into a directory of its results
#: (merge, plot, report): there may be another study's results there too.
RewriteForceOpt = flag(
    bool,
    "--force",
    help="Write into --out even when it holds another study's results, or files that "
    "are not a study's (those of the same names as this study's are replaced).",
)


def _about(seconds: float) -> str:
    return f"about {seconds:.0f} s" if seconds >= 1 else "under a second"


def _dry_share(shard: str | None, nproc: str | None) -> Shard | None:
    """The share --shard names for a dry run, checked as a run checks it."""
    from ..study.shards import parse_shard

    if shard is None:
        return None
    if nproc is not None:
        raise FieldError("nproc", nproc, "shares the whole study: give it without --shard")
    return parse_shard(shard)


def _dry_run(
    plan: Plan, nproc: int, share: Shard | None = None, resumed_of: int | None = None
) -> None:
    """The points and their estimates (of `share` alone, when given); with several
    workers, each one's share. Resuming, `resumed_of` is the number of points of the
    study (or share) that `plan`'s are left of."""
    from ..study.sections import describe_task
    from ..study.shards import share_loads

    devices = ", ".join(f"{name} on {dev}" for name, dev in plan.devices.items())
    if nproc == 1:  # one write: printing 100,000 lines one by one takes seconds
        console.file.write(
            "".join(f"{describe_task(t)}  ~{plan.estimate(t):.2f} s\n" for t in plan.tasks)
        )
        where = devices or "no device needed"
        total = plan.estimate_total(plan.tasks)
        of = f" of share {share}" if share else ""
        points = f"{len(plan.tasks):,} point{'s' * (len(plan.tasks) != 1)}"
        if resumed_of is not None:
            points += f" left of {resumed_of:,}"
        console.print(
            f"{points}{of} ({where}), {_about(total)} (a rough estimate); nothing was run.",
            markup=False,
        )
        return
    shared = share_loads(plan, nproc)
    for rank, (share, load) in enumerate(zip(shared.shares, shared.loads, strict=True)):
        console.print(
            f"rank {rank}: {len(share)} point{'s' * (len(share) != 1)}, {_about(load)}",
            markup=False,
        )
    ratio = shared.balance
    balance = "nothing to run" if ratio is None else f"the slowest rank {ratio:.2f}x the mean"
    left = "" if resumed_of is None else f" left of {resumed_of:,}"
    console.print(
        f"{len(plan.tasks):,} points{left} on {nproc} ranks ({devices or 'no device needed'}): "
        f"{_about(shared.slowest)} of wall time against {_about(shared.total)} on one, "
        f"{balance} (rough estimates); nothing was run.",
        markup=False,
    )


def _finish(doc: dict, out: Path, quiet: bool) -> None:
    """Plots and report, then the summary."""
    from ..render.plots import render_plots
    from ..render.report import findings, write_report
    from ..study.runner import RESULTS_FILE
    from ..study.sections import record_sets, sets_providers_side_by_side
    from .decode_cmd import show_providers

    plots = render_plots(doc, out)
    report = write_report(doc, out)
    if quiet:
        return
    for name, section in doc["sections"].items():
        if sets_providers_side_by_side(name):
            show_providers(section["records"], doc["environment"])
    console.print("Findings:", style="bold")
    print_items(findings(doc))
    # a set without records has no CSV (a section no share has run yet, when merged)
    files = [f"{name}.csv" for name, (records, _) in record_sets(doc).items() if records]
    files.append(RESULTS_FILE)
    if plots:
        files.append(f"{len(plots)} plot" + "s" * (len(plots) != 1))
    console.print(f"Wrote {', '.join(files)} and {report.name} in {out}/", markup=False)


def _tensor_parallel(tp: int) -> str:
    """The command that times a layer split over `tp` ranks (a study cannot)."""
    return f"torchrun --standalone --nproc-per-node {tp} -m attnbench decode-speed --tp {tp}"


def _nproc(text: str | None) -> int:
    """--nproc's value: the number of ranks to plan for (1 when not given)."""
    if text is None:
        return 1
    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_SHARDS:
        raise FieldError("nproc", text, f"expected an integer from 1 to {MAX_SHARDS:,}")
    return int(text)


def _max_points(text: str | None) -> int:
    """--max-points as a number from 1 to MAX_POINTS (MAX_POINTS when not given), read
    from its digits alone: a number of thousands of them is too large, not an error."""
    if text is None:
        return MAX_POINTS
    number = text.strip().replace(",", "")
    if re.fullmatch(INT_TEXT, number) is None:
        raise FieldError("max_points", one_line(text), "expected an integer")
    digits = number.lstrip("+-").lstrip("0")
    if not digits or number.startswith("-"):
        raise FieldError("max_points", one_line(text), "must be >= 1")
    if len(digits) > len(str(MAX_POINTS)) or int(digits) > MAX_POINTS:
        raise FieldError("max_points", one_line(text), f"must be <= {MAX_POINTS:,}")
    return int(digits)


def _study_writes(name: str) -> bool:
    """Whether a study (run, plot, report) may write a file of this name: its
    results.json, report.md, CSVs and plots."""
    from ..render.plots import PLOTS
    from ..study.stores import RESULTS_FILE

    return name in (RESULTS_FILE, "report.md", *PLOTS) or name.endswith(".csv")


def _refuse_own_input(out_dir: Path, inputs: list[str], writes: Callable[[str], bool]) -> None:
    """Refuse an input of the command that lies in `out_dir` under a name the command
    writes there (`writes`): writing would replace it, whatever --force says."""
    for given in inputs:
        path = Path(given)
        if writes(path.name) and same_file(path.parent, out_dir):
            raise FieldError(
                "out",
                shown_path(out_dir),
                f"would replace {shown_path(path)}, an input of this command, with a file "
                "of the same name: write elsewhere, or rename the input",
            )


def check_out_dir(out_dir: Path, force: bool, sweep: str | None = None) -> None:
    """Refuse, before anything is written, a --out directory holding files that are not
    a study's (study.stores.foreign_files): the study's results.json, CSVs, plots and
    report.md would replace files of the same names. Its `sweep` file may be there; other
    files only with --force."""
    from ..study.stores import foreign_files, listed

    shown = shown_path(out_dir)
    problem = bad_name(out_dir) or dangling_folder(out_dir, itself=True)
    if problem:  # before a folder on the way to it is made
        raise FieldError("out", shown, f"cannot use it: {problem}")
    try:
        if not stat.S_ISDIR(os.stat(out_dir).st_mode):
            raise FieldError("out", shown, "not a directory")
        _refuse_own_input(out_dir, [sweep] if sweep else [], _study_writes)
        names = [n for n in foreign_files(out_dir) if not (sweep and same_file(out_dir / n, sweep))]
    except (FileNotFoundError, NotADirectoryError):
        return  # a new directory: made with the study (or refused then, under a file)
    except (OSError, ValueError) as exc:  # no permission, a NUL in the name
        reason = getattr(exc, "strerror", None) or str(exc)
        raise FieldError("out", shown, f"cannot use it: {reason}") from None
    if names and not force:
        raise FieldError(
            "out",
            shown,
            f"holds files that are not a study's ({listed(names)}); "
            "the study's results.json, CSVs, plots and report.md would replace "
            "those of the same names: give an empty or new directory, or "
            "--force",
        )


def _check_run_dir(out_dir: Path, force: bool, sweep: str | None, resume: bool) -> None:
    """check_out_dir for a run; resuming, a results.json there that cannot be read is
    refused for what is wrong with it (truncated, say), not as a file of another kind:
    unread, it makes the study's own files look like another kind too."""
    from ..study.documents import load_results
    from ..study.stores import RESULTS_FILE

    try:
        check_out_dir(out_dir, force, sweep)
    except FieldError:
        if resume and (out_dir / RESULTS_FILE).is_file():
            load_results(out_dir / RESULTS_FILE)
        raise


def _refuse_other_study(out_dir: Path, doc: dict, force: bool) -> None:
    """Unless `force`, refuse to write the files of study `doc` (merged, or re-rendered)
    into `out_dir` when it holds another study's results.json (study.runner.other_study),
    as `run` refuses to start a study there: they would no longer agree with it."""
    from ..study.runner import other_study

    difference = None if force else other_study(out_dir, doc)
    if difference is not None:
        raise FieldError(
            "out",
            shown_path(out_dir),
            f"holds the results of another study ({difference}), whose files these "
            "would replace: give another directory, or --force",
        )


def _refuse_share(out_dir: Path) -> None:
    """A share's directory is written by that share alone: a whole study (run or merged)
    there would replace it, and no merge of the study would take it any more."""
    from ..study.stores import share_in

    share = share_in(out_dir)
    if share is not None:
        raise FieldError(
            "out",
            shown_path(out_dir),
            f"is the directory of share {share} of a "
            "study, which only that share writes: give the study's directory, or "
            "another",
        )


@app.command("run")
@handles_errors
def run_command(
    config: ConfigArg = None,
    config_flag: RunConfigOpt = None,
    out: RunOutOpt = None,
    resume: ResumeOpt = False,
    force: ForceOpt = False,
    dry_run: DryRunOpt = False,
    device: FileDeviceOpt = None,
    quiet: QuietOpt = False,
    max_points: MaxPointsOpt = None,
    nproc: NprocOpt = None,
    shard: ShardOpt = None,
) -> None:
    """Run the sections of a sweep file (params, kvmem, decode, fit, predict; params,
    kvmem and decode when it names none), keeping each point on
    disk as it finishes; then write plots and report.md. Ctrl-C (or SIGTERM, SIGHUP)
    stops after the current point, or the decode points sampled with it (exit 130);
    --resume finishes the rest. Under torchrun every rank runs its share (on its own GPU)
    and rank 0 merges them."""
    from ..study.distributed import process_group, torchrun_launch, wait_for_all
    from ..study.documents import incomplete
    from ..study.merge import merge
    from ..study.plan import check_one_rank_per_point
    from ..study.runner import pending_tasks
    from ..study.shards import parse_shard, shard_plan

    config = _sweep_file(config, config_flag)
    launch = torchrun_launch()
    plan = _plan(config, device, _max_points(max_points), launch)
    check_one_rank_per_point(plan, config, _tensor_parallel)
    if launch is not None and not dry_run:
        shard = _rank_shard(launch, shard, out)
        quiet = quiet or launch.rank > 0  # one rank reports
    workers = _nproc(nproc)
    if dry_run:
        share = _dry_share(shard, nproc)
        if out is None:
            _check_run_flags(None, resume, out, None)  # --resume needs --out
            _dry_run(shard_plan(plan, share) if share else plan, workers, share)
            return
        refuse_empty("out", out)
        plan, store, resume = _prepared(plan, Path(out), share, resume, force, config)
        left = replace(plan, tasks=pending_tasks(plan, store, resume))
        _dry_run(left, workers, share, len(plan.tasks) if resume else None)
        return
    _check_run_flags(nproc, resume, out, shard)
    refuse_empty("out", out)
    share = parse_shard(shard) if shard is not None else None
    out_dir = Path(out) if out else timestamped_dir()
    plan, store, resume = _prepared(plan, out_dir, share, resume, force, config)
    result = _run(plan, store, out_dir, share, resume, quiet, launch is not None, (config, device))
    if launch is not None:
        with process_group(plan.device):
            wait_for_all()  # every share is on disk
        if launch.rank == 0:
            _write_merged(merge([out_dir]), out_dir, quiet, ["attnbench merge", str(out_dir)])
    if any(r.get("status") != "oom" for _, r in incomplete(result.document)):
        raise typer.Exit(1)  # a point failed for another reason than memory: a bug to see


def _sweep_file(argument: str | None, flag: str | None) -> str | None:
    """The sweep file, given as CONFIG or as --config (once)."""
    if argument is not None and flag is not None:
        raise UsageError(f"CONFIG {argument} and --config {flag}: give the sweep file once")
    return argument if flag is None else flag


def _plan(config: str | None, device: str | None, max_points: int, launch: Launch | None) -> Plan:
    """The study planned on `device`; under torchrun on CUDA, on this rank's own GPU."""
    from ..study.runner import plan_study

    try:
        plan = plan_study(config, device, max_points=max_points)
        if launch is not None and plan.device.type == "cuda":  # each rank on its own GPU
            plan = plan_study(config, str(launch.device(plan.device)), max_points=max_points)
    except FieldError as exc:  # the sweep file is an argument here, not a flag
        raise (exc.located(shown_path(str(config))) if exc.field == "config" else exc) from None
    return plan


def _rank_shard(launch: Launch, shard: str | None, out: str | None) -> str:
    """Under torchrun, this rank's share: --shard is torchrun's to give, --out a must."""
    from ..study.shards import Shard

    if shard is not None:
        raise FieldError("shard", shard, "torchrun shares the study among its ranks already")
    if out is None:
        raise FieldError(
            "out", None, "under torchrun, give every rank the study's directory with --out DIR"
        )
    return str(Shard(launch.rank, launch.world_size))


def _check_run_flags(nproc: str | None, resume: bool, out: str | None, shard: str | None) -> None:
    """The flags of a run (not a dry run) that need --out, or --dry-run."""
    if nproc is not None:
        raise FieldError("nproc", nproc, "goes with --dry-run: it plans shares, it starts nothing")
    if resume and out is None:
        raise FieldError("resume", None, "give the results directory to finish with --out DIR")
    if shard is not None and out is None:
        raise FieldError(
            "shard", shard, "give the study's directory, the same for every share, with --out DIR"
        )


def _prepared(
    plan: Plan, out_dir: Path, share: Shard | None, resume: bool, force: bool, sweep: str | None
) -> tuple[Plan, DirectoryStore, bool]:
    """`plan` (or `share` of it) to run into `out_dir`, whose files are checked before any
    is written; the store it writes; whether it resumes (a share that never started is
    started, not resumed)."""
    from ..study.merge import resumed_share_plan
    from ..study.runner import DirectoryStore
    from ..study.shards import shard_dir, shard_plan
    from ..study.stores import check_resumable

    _check_run_dir(out_dir, force, sweep, resume)
    _refuse_share(out_dir)
    if resume and share is None:  # before the directory is made
        check_resumable(out_dir)
    if share is not None:
        plan = resumed_share_plan(plan, share, out_dir) if resume else shard_plan(plan, share)
    store = DirectoryStore(shard_dir(out_dir, share) if share else out_dir)
    return plan, store, resume and (share is None or store.exists())


def _run(
    plan: Plan,
    store: DirectoryStore,
    out_dir: Path,
    share: Shard | None,
    resume: bool,
    quiet: bool,
    torchrun: bool,
    given: tuple[str | None, str | None],
) -> RunResult:
    """Run the study (or `share` of it) into `out_dir`, one writer at a time, then say so
    and write its plots and report. Interrupted, say how to finish it (`given`: the sweep
    file and --device to resume with)."""
    from ..study.runner import run_study
    from ..study.sections import describe_task

    def progress(tasks: Sequence[Task]) -> Generator[Task, None, None]:
        return progress_iter(tasks, describe_task, quiet, weight=plan.estimate)

    try:
        with store.locked() as note:  # one writer per directory, for the whole run
            result = run_study(
                plan, store, resume=resume, on_interrupt=stop_notice, progress=progress
            )
            if note:  # once the study is under way: bad input stays one line
                err_console.print(f"note: {note}", soft_wrap=True, markup=False)
            if result.interrupted:  # stopped after a point: the way out of a Ctrl-C
                raise KeyboardInterrupt
            _ran(result, store, out_dir, share, quiet, torchrun)
    except KeyboardInterrupt:  # while running, or while writing plots and the report
        raise _interrupted(out_dir, *given, share) from None
    except OSError as exc:
        raise _unwritable(exc, out_dir, store) from None
    return result


def _ran(
    result: RunResult,
    store: DirectoryStore,
    out_dir: Path,
    share: Shard | None,
    quiet: bool,
    torchrun: bool,
) -> None:
    """What the run did; then the whole study's plots and report, or (a share run alone)
    how to merge the shares."""
    if not quiet:
        earlier = f" ({result.skipped} recorded earlier)" if result.skipped else ""
        of = f" of share {share}" if share else ""
        console.print(
            f"Ran {result.ran} of {result.total} points{of}{earlier} in {result.seconds:.1f} s."
        )
    if share is None:
        _finish(result.document, out_dir, quiet)
    elif not torchrun and not quiet:
        console.print(
            f"Wrote {store.out_dir}/; when every share has run: attnbench merge {out_dir}",
            markup=False,
        )


def _unwritable(
    exc: OSError, out_dir: Path, store: DirectoryStore | None = None
) -> UsageError | OSError:
    """A write into the results directory failed (a full disk): name the file; when the
    study's results.json could not take the last points, keep them in a file elsewhere.
    Standard output's own failure is not the directory's: `exc` itself, for the command
    group to answer (its reader gone)."""
    if standard_output_failed(exc):
        return exc
    where = exc.filename or out_dir
    kept = ""
    if store is not None and store.document is not None and unsaved(store.path, store.document):
        kept = kept_text(keep_records("run", store.document))
    return FieldError("out", shown_path(where), f"cannot write: {exc.strerror}{kept}")


def _interrupted(
    out_dir: Path, config: str | None, device: str | None, share: Shard | None
) -> typer.Exit:
    again = ["attnbench run", *([config] if config else []), "--out", str(out_dir), "--resume"]
    again += ["--device", device] if device else []
    again += ["--shard", str(share)] if share else []
    err_console.print(
        f"interrupted: the finished points are in {out_dir}/; finish with: {' '.join(again)}",
        soft_wrap=True,
    )
    return typer.Exit(EXIT_INTERRUPTED)


def _rerender(
    results: str,
    out: str | None,
    quiet: bool,
    force: bool,
    write: Callable[[dict, Path], list[Path]],
    writes: Callable[[str], bool],
) -> None:
    """Re-write files from a saved results.json with `write(doc, out_dir)`, which returns
    the paths it wrote (files of names `writes` says); nothing is re-run. The directory of
    the results is the study's."""
    from ..study.documents import load_results

    doc = load_results(results)
    out_dir = Path(out) if out else Path(results).parent
    _refuse_own_input(out_dir, [results], writes)
    if not same_file(out_dir, Path(results).parent):
        check_out_dir(out_dir, force)
        _refuse_other_study(out_dir, doc, force)
    try:
        written = write(doc, out_dir)
    except OSError as exc:
        raise _unwritable(exc, out_dir) from None
    if not quiet:
        for path in written:
            console.print(f"wrote {path}", markup=False)


@app.command("plot")
@handles_errors
def plot_command(
    results: ResultsArg,
    out: BesideOutOpt = None,
    quiet: QuietOpt = False,
    force: RewriteForceOpt = False,
) -> None:
    """Re-draw a study's plots from its results.json; nothing is re-run."""
    from ..render.plots import PLOTS, render_plots

    _rerender(results, out, quiet, force, render_plots, lambda name: name in PLOTS)


@app.command("report")
@handles_errors
def report_command(
    results: ResultsArg,
    out: BesideOutOpt = None,
    quiet: QuietOpt = False,
    force: RewriteForceOpt = False,
) -> None:
    """Re-write a study's report.md from its results.json (showing the plots found beside
    it); nothing is re-run."""
    from ..render.report import write_report

    _rerender(
        results,
        out,
        quiet,
        force,
        lambda doc, out_dir: [write_report(doc, out_dir)],
        lambda name: name == "report.md",
    )


@app.command("merge")
@handles_errors
def merge_command(
    dirs: DirsArg,
    out: MergeOutOpt = None,
    quiet: QuietOpt = False,
    force: RewriteForceOpt = False,
) -> None:
    """Put the shares of a study (run with --shard i/N) back together: results.json, the
    CSVs, plots and report.md, in the study's point order. Exits 1 when some points are in
    no share yet. A share's directory is never written into."""
    from ..study.merge import merge
    from ..study.stores import share_in

    merged = merge([Path(d) for d in dirs])
    out_dir = Path(out) if out else Path(dirs[0])
    if out is None and (share := share_in(out_dir)) is not None:
        raise FieldError(
            "out",
            None,
            f"not given, and the first directory, "
            f"{shown_path(out_dir)}, is share {share} of a study, which the merged "
            "study would replace: give the directory to write into",
        )
    check_out_dir(out_dir, force)
    _refuse_share(out_dir)
    _refuse_other_study(out_dir, merged.document, force)
    again = ["attnbench merge", *dirs] + (["--out", out] if out else [])
    _write_merged(merged, out_dir, quiet, again)


def _write_merged(merged: Merged, out_dir: Path, quiet: bool, again: list[str]) -> None:
    """The merged study's results.json, CSVs, plots and report in `out_dir`; exit 1 when
    some points are in no share. Interrupted, it says to merge `again` (the shares are
    only read)."""
    from ..study.runner import DirectoryStore
    from ..study.sections import record_sets

    store = DirectoryStore(out_dir)
    try:
        with store.locked():
            store.save(merged.document)
            for name, (records, record_type) in record_sets(merged.document).items():
                store.rewrite(name, records, record_type)
            if not quiet:
                points = sum(len(s["records"]) for s in merged.document["sections"].values())
                console.print(
                    f"Merged shares {', '.join(merged.shards)}: {points} point"
                    + "s" * (points != 1)
                    + ".",
                    markup=False,
                )
            _finish(merged.document, out_dir, quiet)
    except OSError as exc:
        raise _unwritable(exc, out_dir) from None
    except KeyboardInterrupt:
        err_console.print(
            f"interrupted: the shares are as they were; merge again with: {' '.join(again)}",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if not merged.complete:
        missing = ", ".join(f"{n} {s}" for s, n in merged.missing.items() if n)
        err_console.print(
            f"incomplete: {missing} point(s) are in no share yet; run the "
            "missing shares (or --resume them) and merge again",
            soft_wrap=True,
        )
        raise typer.Exit(1)
