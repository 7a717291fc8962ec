"""What a group commit's fdatasync costs the event loop: run in the loop itself, or handed to a
worker thread as the store's `GroupCommitService` does (`store.flush.run_in_thread`).

Each round appends 1 KiB to a preallocated file and forces it to disk, one round after another,
in a Trio task. Prints per variant the wall time and the process's CPU time (all threads, user +
system) per flush, p50/p99 of the wall time, and the thread variant over the inline one. The
difference is the price of keeping the event loop free while the disk works: with the flush in
the loop, nothing else runs until the fdatasync returns (a hung disk would hang every
connection and no put could be answered FLUSH_DISK_TIMEOUT); with the thread, the loop goes on
and the deadline watcher can answer.

    .venv/bin/python bench/flush.py [--rounds 2000] [--repeat 3] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, report
from store.flush import run_in_thread

RECORD = b"r" * 1024
Variant = Callable[[int], Awaitable[None]]


async def _inline(fd: int) -> None:
    os.fdatasync(fd)


async def _thread(fd: int) -> None:
    await run_in_thread(lambda: os.fdatasync(fd))


VARIANTS: dict[str, Variant] = {"inline": _inline, "thread": _thread}


def run_variant(path: str, flush: Variant, rounds: int) -> tuple[float, float, list[float]]:
    """(wall s, CPU s, per-flush wall times) for `rounds` append + flush rounds."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, rounds * len(RECORD) + 4096)
        os.fsync(fd)
        times: list[float] = []

        async def main() -> None:
            for index in range(rounds):
                os.pwrite(fd, RECORD, index * len(RECORD))
                started = time.perf_counter()
                await flush(fd)
                times.append(time.perf_counter() - started)

        wall, cpu = time.perf_counter(), time.process_time()
        trio.run(main)
        return time.perf_counter() - wall, time.process_time() - cpu, sorted(times)
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        path = os.path.join(root, "flush.dat")
        cpu_per_flush: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for attempt in range(args.repeat):
            for name, flush in VARIANTS.items():  # alternating, so drift falls on both
                wall, cpu, times = run_variant(path, flush, args.rounds)
                cpu_per_flush[name].append(cpu / args.rounds)
                report(
                    f"flush {name}",
                    run=attempt + 1,
                    wall_us=wall / args.rounds * 1e6,
                    cpu_us=cpu / args.rounds * 1e6,
                    p50_us=percentile(times, 0.5) * 1e6,
                    p99_us=percentile(times, 0.99) * 1e6,
                )
        medians = {name: sorted(values)[len(values) // 2] for name, values in cpu_per_flush.items()}
        report(
            "ratio thread_over_inline",
            cpu=medians["thread"] / medians["inline"],
            extra_cpu_us=(medians["thread"] - medians["inline"]) * 1e6,
        )


if __name__ == "__main__":
    main()
