"""`python -m attnbench` and the `attnbench` command: the CLI, with Ctrl-C answered even
while the libraries are still loading."""

from __future__ import annotations

import os
import signal
import sys
import threading


def main() -> None:
    open_closed_streams()
    replace_unencodable()
    signal.signal(signal.SIGINT, interrupt_outside_torch_import)
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print("error: interrupted before anything ran", file=sys.stderr)
        sys.exit(130)
    cli_main()


def interrupt_outside_torch_import(signum: int, frame: object) -> None:
    """Ctrl-C as Python answers it (KeyboardInterrupt), but not while torch is being
    imported: its C code imports numpy and takes any error there as numpy missing, so a
    Ctrl-C at that moment would leave numpy half-loaded and the command going on, to fail
    later with a traceback. It is sent again a moment later, once torch is loaded."""
    torch = sys.modules.get("torch")
    if torch is not None and getattr(getattr(torch, "__spec__", None), "_initializing", False):
        again = threading.Timer(0.05, os.kill, (os.getpid(), signum))
        again.daemon = True  # a command done by then exits as it would have
        again.start()
        return
    raise KeyboardInterrupt


def open_closed_streams() -> None:
    """A standard stream the shell closed (`attnbench ... >&-`) writes to the null device:
    the command runs, its files are written, and what it would print is dropped, where
    Python leaves the stream None and the first print would stop it with a traceback."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115


def replace_unencodable() -> None:
    """Standard output and error that cannot encode a character print '?' in its place:
    under the C locale without UTF-8 mode they are ASCII, and a table title's '·' would
    stop the command with a traceback after its work was done."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # io.TextIOWrapper's
        if reconfigure is not None and (stream.encoding or "").lower().replace("-", "") != "utf8":
            reconfigure(errors="replace")


if __name__ == "__main__":
    main()
