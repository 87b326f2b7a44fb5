"""The worker processes of an A/B run, seen from the head process: one long-lived worker
per side (worker.py run by the side's python), spoken to in JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from ..errors import UsageError, brief
from .sides import Side, last_line

#: The worker script, run by path so that it imports the side's attnbench.
SCRIPT = Path(__file__).resolve().with_name("worker.py")
#: The sides of an A/B run, each with its worker and log.
SIDES = ("base", "head")
#: Seconds a worker has to exit once its input is closed, before it is killed.
EXIT_WAIT_S = 10


class Worker:
    """The worker of `side`, its stderr in `log`. `start` launches it, `greet` waits for
    its greeting (what it imported), `visit` times one point; any failure is one line
    naming the side and its log."""

    def __init__(self, side: Side, log: Path) -> None:
        self.side = side
        self.log = log
        self.greeting: dict[str, Any] = {}
        self._process: subprocess.Popen | None = None
        self._log_file: IO[str] | None = None

    def start(self, threads: int, device: str) -> None:
        """Launch the worker, its stderr in a new log: what is at the log's path (a log
        of an earlier run: see existing_logs) is replaced, never written through (a
        symlink there is replaced, not followed)."""
        try:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self.log.unlink(missing_ok=True)
            self._log_file = self.log.open("x", encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"writing the {self.side.name} worker's log {self.log} failed: {exc.strerror}"
            ) from None
        args = [str(self.side.python), "-I", str(SCRIPT), str(self.side.source)]
        try:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log_file,
                text=True,
            )
        except OSError as exc:
            raise UsageError(
                f"starting the {self.side.name} worker ({self.side.label}) "
                f"failed: {self.side.python}: {exc.strerror}"
            ) from None
        self._send({"threads": threads, "device": device})

    def greet(self) -> dict[str, Any]:
        self.greeting = self._receive()
        return self.greeting

    def visit(self, point: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        """The step's median, p25, p75, samples and status of one visit of `point`."""
        self._send({"point": point, "options": options})
        return self._receive()

    def close(self) -> None:
        """Close its input (it exits at the end of it); kill it if it does not."""
        process, self._process = self._process, None
        if process is not None:
            for pipe in (process.stdin, process.stdout):
                with suppress(OSError):  # it is gone already
                    pipe.close()  # type: ignore[union-attr]
            try:
                process.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _send(self, message: dict) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(message) + "\n")
            self._process.stdin.flush()
        except OSError:  # it has exited: say why
            raise self._stopped() from None

    def _receive(self) -> dict[str, Any]:
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise self._stopped()
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            raise UsageError(
                f"the {self.side.name} worker ({self.side.label}) answered "
                f"{brief(line.strip())}; see {self.log}"
            )
        return message

    def _stopped(self) -> UsageError:
        """The error of a worker that exited: its exit code and the last line of its log."""
        assert self._process is not None
        code = self._process.wait()
        if self._log_file is not None:
            self._log_file.flush()
        said = last_line(self.log.read_text(errors="replace"))
        tail = f": {said}" if said else ""
        return UsageError(
            f"the {self.side.name} worker ({self.side.label}) stopped with exit "
            f"code {code}{tail}; see {self.log}"
        )


def log_path(logs: Path, side: str) -> Path:
    """Where the worker of `side` (base, head) logs: logs/<side>.log."""
    return logs / f"{side}.log"


def existing_logs(logs: Path, sides: Sequence[str]) -> list[str]:
    """The workers' logs (of `sides`) already in `logs`, which a run would replace: a
    user's own base.log is not a log to lose unless they say so."""
    try:
        return [p.name for p in (log_path(logs, s) for s in sides) if os.path.lexists(p)]
    except ValueError:  # a NUL in the name: refused where the folder is made
        return []


@contextmanager
def workers(sides: Sequence[Side], logs: Path, threads: int, device: str) -> Iterator[list[Worker]]:
    """A started and greeted worker per side (logs/<side>.log), closed on the way out.
    They start together: each imports torch, seconds that overlap."""
    with ExitStack() as stack:
        started = []
        for side in sides:
            worker = Worker(side, log_path(logs, side.name))
            stack.callback(worker.close)
            worker.start(threads, device)
            started.append(worker)
        for worker in started:
            worker.greet()
        yield started
