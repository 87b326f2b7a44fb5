"""The wall time of one study on 1 rank against N ranks under torchrun, on this machine.

The study (scripts/examples/scaling.yaml) takes a fixed number of samples per point, so
both runs do the same work. One process uses every core with torch's threads; under
torchrun each rank runs one thread (torchrun's default), so N ranks on N cores share the
points instead of the cores. Prints a Markdown table.

    python scripts/scaling_wall_time.py [--nproc 2] [--study scripts/examples/scaling.yaml]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wall_time(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--study", default=str(ROOT / "scripts" / "examples" / "scaling.yaml"))
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as scratch:
        one = wall_time(
            [str(bin_dir / "attnbench"), "run", args.study, "--out", f"{scratch}/one", "-q"]
        )
        many = wall_time(
            [
                str(bin_dir / "torchrun"),
                "--standalone",
                "--nproc-per-node",
                str(args.nproc),
                "-m",
                "attnbench",
                "run",
                args.study,
                "--out",
                f"{scratch}/many",
                "-q",
            ]
        )
    cores = os.cpu_count()
    print(f"{Path(args.study).name} on {cores} cores, points timed with a fixed sample count")
    print()
    print("| ranks | wall time | speed-up |")
    print("|---|---|---|")
    print(f"| 1 | {one:.1f} s | 1.00x |")
    print(f"| {args.nproc} | {many:.1f} s | {one / many:.2f}x |")


if __name__ == "__main__":
    main()
