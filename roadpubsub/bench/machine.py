"""The machine and software a benchmark ran on, and this process's peak memory."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from typing import Any

import numpy as np

__all__ = ["machine_info", "max_rss_mib"]

_MIB = 1024 * 1024


def _read_proc(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith(key.lower()):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_info() -> dict[str, Any]:
    """The machine and software a benchmark ran on (CPU, cores, RAM, versions)."""
    import numba
    import scipy

    mem = _read_proc("/proc/meminfo", "MemTotal")
    mem_gib = round(int(mem.split()[0]) / 1024 / 1024, 2) if mem else None
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    try:
        from importlib.metadata import version

        ours = version("roadpubsub")
    except Exception:  # pragma: no cover - not installed
        ours = None
    return {
        "cpu_model": _read_proc("/proc/cpuinfo", "model name") or platform.processor() or None,
        "cpu_mhz": _read_proc("/proc/cpuinfo", "cpu MHz"),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "ram_gib": mem_gib,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "roadpubsub": ours,
        "numba_threads": getattr(numba.config, "NUMBA_NUM_THREADS", None),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def max_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 if sys.platform != "darwin" else _MIB), 1)
