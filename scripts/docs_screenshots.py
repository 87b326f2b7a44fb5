"""Screenshots of the documentation site as a reader sees it, at desktop and phone width.

Serves site/ (built by `make docs`) on localhost and photographs pages with headless
Chromium (Debian's `chromium` package: apt-get install chromium), each page at a section
(its #anchor is where the screenshot starts). Writes the PNGs into --out, by default a
new temporary directory, and prints their paths: look at them for tables cut off, code
blocks overflowing without a scrollbar, and plots too small to read.

    python scripts/docs_screenshots.py [--out DIR] [--site site] [PAGE#ANCHOR ...]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A command page with wide tables, the methodology and the capacity planning, each at a
#: section with a table, a code block or a plot, and the home page.
PAGES = (
    "commands/decode-speed/#providers",
    "commands/kvmem/#columns",
    "methodology/#how-well-the-gate-works",
    "capacity-planning/#llama-3-70b-on-8-80-gib-at-8k-context-float16-and-float8-caches",
    "index.html",
)
#: (width, height) of the window: a laptop's browser, and a phone's.
SIZES = {"desktop": (1280, 1600), "phone": (390, 1600)}
ATTEMPTS = 3
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--force-device-scale-factor=1",
    "--virtual-time-budget=5000",
)
#: The page in a frame the size of the window, scrolled to its section once it has
#: loaded. Headless Chromium draws a blank screenshot of a page scrolled to an anchor, and
#: does not always scroll a frame given one; a frame of the same origin is scrolled here.
FRAME = """<!doctype html><html><body style="margin:0">
<iframe id="page" src="site/{page}" style="border:0;display:block;width:100vw;height:100vh">
</iframe><script>
const page = document.getElementById("page");
page.addEventListener("load", () => setTimeout(() => {{
  const target = page.contentDocument.getElementById("{anchor}");
  if (target) target.scrollIntoView();
}}, 300));
</script></body></html>"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """`root` served on localhost for as long as the block runs; yields its address."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(root),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(50):  # until it answers, five seconds at most
            with contextlib.suppress(OSError):
                urllib.request.urlopen(address, timeout=1).close()
                break
            time.sleep(0.1)
        yield address
    finally:
        server.terminate()
        server.wait()


def blank(path: Path) -> bool:
    """The PNG at `path` is of one colour: its pixel bytes take a handful of values."""
    data, chunks = path.read_bytes(), []
    at = 8  # past the signature: chunks of length, type, data and CRC
    while at < len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        if data[at + 4 : at + 8] == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + length])
        at += 12 + length
    return len(set(zlib.decompress(b"".join(chunks)))) < 4


def screenshot(chromium: str, url: str, size: tuple[int, int], path: Path) -> None:
    """A screenshot of `url` in a window of `size`; taken again when it comes out blank,
    as headless Chromium's sometimes do."""
    for _ in range(ATTEMPTS):
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [
                    chromium,
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={profile}",
                    f"--window-size={size[0]},{size[1]}",
                    f"--screenshot={path}",
                    url,
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
            )
        if not blank(path):
            return
    print(f"{path}: blank after {ATTEMPTS} attempts", file=sys.stderr)


def name(page: str) -> str:
    """A file name for a page: commands/kvmem/#columns -> commands-kvmem."""
    return page.split("#")[0].strip("/").removesuffix(".html").replace("/", "-") or "index"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", default=list(PAGES), help="PAGE#ANCHOR of site/")
    parser.add_argument("--site", type=Path, default=ROOT / "site")
    parser.add_argument("--out", type=Path, help="where to write (default: a temporary dir)")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not found: apt-get install chromium")
    if not (args.site / "index.html").is_file():
        sys.exit(f"{args.site}/index.html not found: build the site first (make docs)")
    out = args.out or Path(tempfile.mkdtemp(prefix="attnbench-screenshots-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as root, serve(Path(root)) as address:
        (Path(root) / "site").symlink_to(args.site.resolve())
        for page in args.pages:
            frame = Path(root) / f"{name(page)}.html"
            path, _, anchor = page.partition("#")
            frame.write_text(FRAME.format(page=path, anchor=anchor))
            for kind, size in SIZES.items():
                shot = out / f"{name(page)}-{kind}.png"
                screenshot(chromium, address + frame.name, size, shot)
                print(shot)


if __name__ == "__main__":
    main()
