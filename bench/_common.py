"""Helpers shared by the benchmarks: percentiles, process memory, one printed line per figure."""

from __future__ import annotations

import os
import platform
import resource


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of an ascending list, nearest-rank; 0.0 for an empty list."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def rss_mib(pid: int | None = None) -> float:
    """Resident set size of a process in MiB, from /proc (the page cache is not counted)."""
    return _status_kib(pid, "VmRSS:") / 1024


def anon_rss_mib(pid: int | None = None) -> float:
    """The anonymous part of a process's resident set in MiB: its own memory, without the
    pages of files it maps (a broker's mmap'ed commit log and index)."""
    return _status_kib(pid, "RssAnon:") / 1024


def _status_kib(pid: int | None, key: str) -> int:
    with open(f"/proc/{pid or os.getpid()}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time a process has used so far, all its threads, from /proc."""
    with open(f"/proc/{pid or os.getpid()}/stat", encoding="ascii") as stat:
        # the fields after the command name, which is in parentheses and may hold spaces
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    """Other work on the machine skews every figure; say how busy it was."""
    one, five, _ = os.getloadavg()
    return f"loadavg_1m={one:.2f} loadavg_5m={five:.2f}"


def print_machine() -> None:
    """One `machine` line: cores, CPU model, kernel, Python and the load average."""
    model = "unknown cpu"
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    print(
        f"machine cpus={os.cpu_count()} cpu={model!r} kernel={platform.release()} "
        f"python={platform.python_version()} {load_average()}",
        flush=True,
    )


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(name: str, **figures: float | int | str) -> None:
    """Print one benchmark row as `name key=value ...`, floats with three significant decimals."""
    parts = [f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()]
    print(name, *parts, flush=True)
