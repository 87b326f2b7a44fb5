"""`python -m attnbench` and the `attnbench` command: the CLI, with Ctrl-C answered even
while the libraries are still loading."""

from __future__ import annotations

import sys


def main() -> None:
    replace_unencodable()
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print("error: interrupted before anything ran", file=sys.stderr)
        sys.exit(130)
    cli_main()


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
