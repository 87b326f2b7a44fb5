"""`python -m attnbench` and the `attnbench` command: the CLI, with Ctrl-C answered even
while the libraries are still loading."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print("error: interrupted before anything ran", file=sys.stderr)
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
