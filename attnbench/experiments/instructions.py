"""CPU instructions of one decode step per point, counted by callgrind through
torch.utils.benchmark.Timer.collect_callgrind: unlike a time, a count does not depend on
what else the machine runs, so it can gate CPU overhead on shared CI runners.

Starting torch under valgrind takes about a minute, so every point is counted in one
valgrind process. The Timer's setup builds each point's workload as decode.run does, and
its statement is a Dispatcher: each execution runs one step, of the point whose turn it
is. torch's generated script runs the statement min(number, 10) times as a warm-up, then,
for each of its repeats, `number` times between toggles of the collection. With
number <= 10, execution k therefore falls in slot k // number: slot 0 is the warm-up (it
runs point 0) and slot i >= 1 is the repeat that counts point i - 1.

Only cached CPU steps without an untimed set-up are counted; other points get the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
from torch.utils.benchmark import Timer

from ..measure.devices import free_memory_bytes
from ..measure.memory import skip_status
from ..modules.dtypes import torch_dtype
from ..modules.providers import PROVIDERS
from ..modules.workload import Unsupported, Workload
from .context import Counted
from .decode import (
    SEED,
    DecodeOptions,
    DecodePoint,
    WrongOutput,
    build_layer,
    check,
    decode_bytes,
    prepared,
    step_inputs,
    unsupported_reason,
)

#: The most executions per repeat: torch warms up with min(number, 10) executions, and the
#: slots line up with the repeats only when the warm-up is exactly `number` of them.
MAX_NUMBER = 10
#: What torch's collect_callgrind runs from PATH.
TOOLS = ("valgrind", "callgrind_control", "callgrind_annotate")
NO_VALGRIND = "unsupported: valgrind is not installed (Debian: apt install valgrind)"
NO_BINDINGS = "unsupported: torch has no callgrind bindings on this platform"
NOT_CACHED = "unsupported: instructions are counted for cached steps"
NOT_CPU = "unsupported: instructions are counted on the CPU"
#: Why a step with an untimed set-up (Workload.step_setup) is not counted: the Dispatcher
#: would run the set-up inside the counted executions.
NEEDS_SETUP = "the step needs an untimed set-up, which the count would include"
#: The environment of the valgrind process: a fixed hash seed (dict and set orders, hence
#: the interpreter's path, are the same every run) and one OpenMP thread.
CHILD_ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: glibc's malloc tuned so that a step's allocations cost the same whatever the heap's
#: history: its per-thread cache keeps every freed small chunk (7 per size by default, the
#: rest going to bins whose cost depends on what else the process allocated). Without it
#: a quarter of a step's instructions were malloc's, and a point's count moved by 1.5%
#: between a valgrind process counting it alone and one counting nine points.
MALLOC_TUNABLE = "glibc.malloc.tcache_count=65535"
CPU = torch.device("cpu")

#: The Timer's setup and statement: builtins only cross into the valgrind process, so the
#: points (with their options) travel as JSON text.
SETUP = """\
from attnbench.experiments.instructions import Dispatcher
_dispatch = Dispatcher.from_json({points!r}, {number})
"""
STMT = "_dispatch()"


def valgrind_missing() -> str | None:
    """Why instructions cannot be counted here, or None; found without starting valgrind."""
    if not all(shutil.which(tool) for tool in TOOLS):
        return NO_VALGRIND
    supported = getattr(torch._C, "_valgrind_supported_platform", None)
    if supported is None or not supported():
        return NO_BINDINGS
    return None


def valgrind_version() -> str | None:
    """valgrind's version ('valgrind-3.19.0'), or None without valgrind. Read from the
    banner of `true` run under it: the option that prints the version is spelled like a
    flag, which only the CLI may spell (tests/test_flag_names.py)."""
    if shutil.which("valgrind") is None:
        return None
    banner = subprocess.run(["valgrind", "true"], capture_output=True, text=True).stderr
    found = re.search(r"Using Valgrind-(\S+)", banner)
    return f"valgrind-{found.group(1)}" if found else None


def section_counts(points: list, options: DecodeOptions, device: torch.device) -> dict:
    """A decode section's pre-pass: with `instructions` on, each cached point's
    instructions per step with the valgrind that counted them (or why there is none),
    every point in one valgrind process."""
    if not options.instructions:
        return {}
    cached = [p for p in points if p.cached]
    counts = count_instructions(cached, device=device)
    counted = any(isinstance(n, int) for n in counts)
    counter = valgrind_version() if counted else None  # no valgrind run for none
    return {
        point: Counted(n, counter) if isinstance(n, int) else n
        for point, n in zip(cached, counts, strict=True)
    }


def count_instructions(
    points: Sequence[DecodePoint],
    number: int = MAX_NUMBER,
    device: torch.device | str = "cpu",
) -> list[int | str]:
    """The instructions of one decode step (the workload's `step`) of each point, or the
    reason it is not counted ('unsupported: ...', 'wrong: ...', 'skipped: ...').

    All countable points share one valgrind process: one collect_callgrind of
    len(points) repeats of `number` executions each. A count is the repeat's instructions
    (callgrind's exclusive total less the noisy dict lookups, `denoise`) over `number`.
    It includes the Dispatcher's bookkeeping (a few hundred instructions per execution)
    and, once per repeat, entering and leaving inference mode and the provider's pinned
    SDPA kernel, the same for every run of a point."""
    if not 1 <= number <= MAX_NUMBER:
        raise ValueError(
            f"number must be within 1..{MAX_NUMBER}, got {number}: torch warms "
            f"up with min(number, {MAX_NUMBER}) executions, which must be one "
            "slot of the Dispatcher"
        )
    for point in points:
        check(point)
    missing = valgrind_missing()
    if missing is not None:
        return [missing] * len(points)
    reasons = [refusal(point, torch.device(device)) for point in points]
    counted = [point for point, reason in zip(points, reasons, strict=True) if reason is None]
    counts = iter(_collect(counted, number) if counted else [])
    return [next(counts) if reason is None else reason for reason in reasons]


def refusal(point: DecodePoint, device: torch.device) -> str | None:
    """Why the point's step is not counted, or None. The workload is built and checked
    here, outside valgrind, so that a provider's refusal is the point's reason rather than
    a failure of the whole valgrind process."""
    if not point.cached:
        return NOT_CACHED
    if device.type != "cpu":
        return NOT_CPU
    reason = unsupported_reason(point, CPU)
    if reason is not None:
        return f"unsupported: {reason}"
    skipped = skip_status(decode_bytes(point, point.options.prefill), free_memory_bytes(CPU))
    if skipped is not None:
        return skipped
    try:
        warmed_workload(point)
    except Unsupported as exc:
        return f"unsupported: {exc}"
    except WrongOutput as exc:
        return f"wrong: {exc}"
    return None


def running(point: DecodePoint) -> ExitStack:
    """What the point's calls run inside, as in decode.run: inference mode and the
    provider's pinned SDPA kernel, if any."""
    stack = ExitStack()
    stack.enter_context(torch.inference_mode())
    stack.enter_context(PROVIDERS[point.provider].running())
    return stack


def warmed_workload(point: DecodePoint) -> Workload:
    """The point's workload as decode.run prepares it on the CPU (seeded layer and inputs,
    step checked against the reference), its cache filled by the prefill as the timings
    do, and its step called its options' `warmup` more times (lazy initialisation, oneDNN
    weight packing) so that none of that is counted. Raises Unsupported, as prepared
    does, for a step that needs an untimed set-up (NEEDS_SETUP)."""
    layer = build_layer(
        point.shape, PROVIDERS[point.provider].backend, torch_dtype(point.dtype), CPU
    )
    options = point.options
    with running(point):
        work = prepared(point, step_inputs(point, layer, CPU))
        if work.step_setup is not None:
            raise Unsupported(NEEDS_SETUP)
        if options.prefill and work.prefill is not None:
            if work.prefill_setup is not None:
                work.prefill_setup()
            work.prefill()
        for _ in range(options.warmup):
            work.step()
    return work


class Dispatcher:
    """The statement collect_callgrind executes: each call runs the step of the point of
    its slot (see the module's docstring) and records that point's index in `ran`.

    A counted slot enters the point's `running` contexts at its first execution and
    leaves them at its last, so their cost is paid once per repeat; a warm-up execution
    enters and leaves them itself. Whatever executes the statement then leaves nothing
    entered, however many times it does: the Timer also runs the setup and one execution
    in the calling process, to check them, before it starts valgrind."""

    def __init__(
        self, points: Sequence[DecodePoint], steps: Sequence[Callable[[], object]], number: int
    ) -> None:
        self.points = list(points)
        self.steps = list(steps)
        self.number = number
        self.ran: list[int] = []
        self._held = ExitStack()

    @classmethod
    def from_json(cls, points: str, number: int) -> Dispatcher:
        """The dispatcher of SETUP: every point's warmed workload, built in this process."""
        torch.manual_seed(SEED)
        decoded = [DecodePoint.of_dict(fields) for fields in json.loads(points)]
        works = [warmed_workload(point) for point in decoded]
        return cls(decoded, [work.step for work in works], number)

    def __call__(self) -> None:
        slot, turn = divmod(len(self.ran), self.number)
        index = max(slot - 1, 0)
        self.ran.append(index)
        if slot == 0:
            with running(self.points[index]):
                self.steps[index]()
            return
        if turn == 0:
            self._held.enter_context(running(self.points[index]))
        self.steps[index]()
        if turn == self.number - 1:
            self._held.close()


def setup_code(points: Sequence[DecodePoint], number: int) -> str:
    """The Timer's setup for `points`: it builds their Dispatcher as `_dispatch`."""
    return SETUP.format(points=json.dumps([p.to_dict() for p in points]), number=number)


def _collect(points: Sequence[DecodePoint], number: int) -> list[int]:
    """Each point's instructions per step, from one valgrind process."""
    timer = Timer(stmt=STMT, setup=setup_code(points, number), num_threads=1)
    with _child_environment():
        stats = timer.collect_callgrind(number=number, repeats=len(points), collect_baseline=False)
    return [repeat.counts(denoise=True) // number for repeat in stats]


@contextmanager
def _child_environment() -> Iterator[None]:
    """CHILD_ENV, MALLOC_TUNABLE added to any GLIBC_TUNABLES, and this interpreter's
    directory first on PATH: torch starts the valgrind process's `python` from PATH and
    refuses one that is not this interpreter with this torch (a virtualenv that is not
    activated)."""
    tunables = [os.environ.get("GLIBC_TUNABLES"), MALLOC_TUNABLE]
    path = [os.path.dirname(sys.executable), os.environ.get("PATH")]
    changes = {
        **CHILD_ENV,
        "GLIBC_TUNABLES": ":".join(filter(None, tunables)),
        "PATH": os.pathsep.join(filter(None, path)),
    }
    before = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
