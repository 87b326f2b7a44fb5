"""The environment a result was measured in, recorded with every result.

torch is imported where its facts are read: the environment of a run whose points are
computed without torch (study.plan.Plan.uses_torch) is collected without it, a second
sooner."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__

if TYPE_CHECKING:
    import torch


#: The type of each field an environment records (collect_environment, and the peaks
#: and cache size a study adds: study.runner): "str", "int" or "float" (a number >= 0),
#: "floats" a list of them, "by dtype" an object of numbers (or of lists: "floats by
#: dtype") keyed by dtype. A results file's environment is checked against it.
FIELD_TYPES = {
    **dict.fromkeys(
        ("attnbench_version", "python_version", "torch_version", "platform", "cpu_model"),
        "str",
    ),
    **dict.fromkeys(("device", "device_name", "cuda_version", "git_commit"), "str"),
    **dict.fromkeys(("num_threads", "cudnn_version", "gpu_memory_bytes", "cache_bytes"), "int"),
    "peak_gbps": "float",
    "peak_gbps_probes": "floats",
    "peak_tflops": "by dtype",
    "peak_tflops_probes": "floats by dtype",
}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_bytes(device: torch.device) -> int | None:
    """The device's last-level cache: the largest cache of CPU 0 (sysfs), or the GPU's L2;
    None where it cannot be read. A step whose bytes fit in it need not read memory."""
    if device.type == "cuda":
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.get_device_properties(index).L2_cache_size or None
    sizes = []
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = size.read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text[:-1].isdigit() and text[-1] in units:
            sizes.append(int(text[:-1]) * units[text[-1]])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes, default=None)


def git_commit() -> str | None:
    """The commit of the checkout attnbench runs from, when it runs from one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def collect_environment(device: torch.device | str | None = "cpu") -> dict:
    """A flat dict: versions, CPU, threads, device and GPU facts (None where not
    applicable). `device` None: a run that neither measures nor counts on torch, whose
    environment is the CPU's without torch loaded: torch's version is its installed
    package's, and its threads and CUDA build, which only a loaded torch tells, are None."""
    if device is None:
        torch_version, threads, cuda = metadata.version("torch"), None, None
    else:
        import torch

        device = torch.device(device)
        torch_version, cuda = torch.__version__, torch.version.cuda
        threads = torch.get_num_threads()
    env = {
        "attnbench_version": __version__,
        "python_version": platform.python_version(),
        "torch_version": torch_version,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "num_threads": threads,
        "device": "cpu" if device is None else str(device),
        "device_name": cpu_model(),
        "cuda_version": cuda,
        "cudnn_version": None,
        "gpu_memory_bytes": None,
        "git_commit": git_commit(),
    }
    if device is not None and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        env["device"] = f"cuda:{index}"
        env["device_name"] = props.name
        env["gpu_memory_bytes"] = props.total_memory
        env["cudnn_version"] = torch.backends.cudnn.version()
    return env
