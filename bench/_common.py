"""Helpers shared by the benchmarks: percentiles, process memory, one printed line per figure."""

from __future__ import annotations

import os
import resource


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of an ascending list, nearest-rank; 0.0 for an empty list."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def rss_mib(pid: int | None = None) -> float:
    """Resident set size of a process in MiB, from /proc (the page cache is not counted)."""
    with open(f"/proc/{pid or os.getpid()}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(name: str, **figures: float | int | str) -> None:
    """Print one benchmark row as `name key=value ...`, floats with three significant decimals."""
    parts = [f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()]
    print(name, *parts, flush=True)
