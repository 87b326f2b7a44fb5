"""The worker of one side of `attnbench ab`: a script, run by path with the side's own
python (`python -I worker.py SOURCE`), so that every import below is that side's
attnbench, found in SOURCE, never the package this file belongs to.

It speaks JSON lines: stdin gets {"threads": n, "device": "cpu"} first, then one visit
per line, {"point": {field: value}, "options": {...}}; stdout answers the first with
{"attnbench": path, "version": v, "torch": v, "threads": n} and each visit with the
step's {"step_ms_median", "step_ms_p25", "step_ms_p75", "samples_ms", "status"}. Anything
else printed goes to stderr, the side's log. It needs nothing of attnbench but
experiments.decode's DecodePoint and run, and experiments.context's Context, so an older
revision runs it too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO


def reply(channel: TextIO, message: dict) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def visit(request: dict, device: Any) -> dict:
    """One visit: the point rebuilt with this side's DecodePoint (fields it lacks left
    out), run with the options given; a failure is the visit's status."""
    from attnbench.experiments import decode
    from attnbench.experiments.context import Context

    try:
        point, context = rebuilt(decode, request, Context, device)
        record = decode.run(point, context)
    except Exception as exc:
        said = str(exc).strip().splitlines()
        return {"status": f"error: {type(exc).__name__}: {said[0] if said else ''}".rstrip(": ")}
    return {
        "step_ms_median": record.step_ms_median,
        "step_ms_p25": getattr(record, "step_ms_p25", None),
        "step_ms_p75": getattr(record, "step_ms_p75", None),
        "samples_ms": list(getattr(record, "samples_ms", None) or []),
        "status": _status(record),
    }


def rebuilt(decode: Any, request: dict, context: Any, device: Any) -> tuple[Any, Any]:
    """The visit's point and context, as this side's revision takes them: a point that
    carries its typed options (`options` among its fields), or, in earlier revisions, a
    context that holds the options as sent. A field this revision lacks is left out when
    it is unset (None), and refused when it is set."""
    known = decode.DecodePoint.__dataclass_fields__
    unknown = [k for k, v in request["point"].items() if k not in known and v is not None]
    if unknown:  # a field set that this revision would ignore: another point
        raise ValueError(f"this revision's decode points have no {', '.join(unknown)}")
    fields = {k: v for k, v in request["point"].items() if k in known}
    if "options" in known:
        options = decode.DecodeOptions.of_mapping(request["options"])
        return decode.DecodePoint(**fields, options=options), context(device=device)
    return decode.DecodePoint(**fields), context(device=device, options=request["options"])


def _status(record: object) -> str:
    """The visit's status: `ok` for any point that was timed (a noisy one too: `ab` judges
    the spread itself, round by round), the record's status otherwise. Parsed here, not by
    records.Status: the worker runs against either side's tree, an older one too."""
    status = getattr(record, "status", None) or "ok"
    word = status.split(":", 1)[0].strip()
    return "ok" if word == "noisy" else status


def main() -> None:
    source = Path(sys.argv[1]).resolve()
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the answers alone
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # any other output: to the log
    sys.stdout = sys.stderr
    import attnbench

    found = Path(attnbench.__file__).resolve()
    if not found.is_relative_to(source):
        sys.exit(
            f"attnbench is imported from {found.parent}, not from {source}: this "
            "side's environment does not put its source first"
        )
    import torch

    import attnbench.experiments.context
    import attnbench.experiments.decode  # noqa: F401  (a side lacking them fails here)

    setup = json.loads(sys.stdin.readline())
    torch.set_num_threads(setup["threads"])
    device = torch.device(setup["device"])
    reply(
        channel,
        {
            "attnbench": str(found),
            "version": getattr(attnbench, "__version__", None),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
    )
    for line in sys.stdin:
        reply(channel, visit(json.loads(line), device))


if __name__ == "__main__":
    main()
