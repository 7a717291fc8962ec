"""Send throughput and ack latency of the broker, against Redis 7 XADD and a minimal Trio server.

A load generator in several processes (plain sockets, requests encoded before the clock starts)
keeps P connections x W requests in flight: SEND_MESSAGE_V2 with a Java client's JSON header to
`rmq-broker serve` and to bench/minimal_server.py (frames split, canned SUCCESS replies: the
floor of a Trio server), and XADD of the same bodies to `redis-server`. Each server runs as a
subprocess on a free loopback port with a fresh directory, once per flush mode:

    SYNC rows   broker --flush-disk-type SYNC_FLUSH   Redis --appendonly yes --appendfsync always
    ASYNC rows  broker --flush-disk-type ASYNC_FLUSH  Redis --appendonly yes --appendfsync everysec

Prints msgs/s, MB/s (bodies), p50/p99/p999 ack latency and CPU per message per row and server,
ours/Redis and ours/minimal ratios, PASS/MISS per target, the servers' memory (idle and peak
under load), and writes a PNG chart.

    .venv/bin/python bench/send.py [--rows SYNC-8x1-1KiB,...] [--duration 3] [--no-redis]

`--brokers N` measures a cluster instead: 1..N brokers registered with one name server, the
first row's load spread over them (bench/cluster_send.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import queue
import sys
import time
from array import array
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import cluster_send
from bench._common import load_average, print_machine, report
from bench._loadgen import Dialect, Load, Share, ShareResult, Target
from bench._loadgen_profile import print_hot_spots, profiling
from bench._loadgen_report import (
    Figures,
    Row,
    chart,
    figures,
    print_ratios,
    print_row,
    print_targets,
)
from bench._loadgen_servers import (
    BROKER_EXECUTABLE,
    FlushMode,
    Kind,
    Server,
    redis_available,
    running,
)

OUT: Final = Path(__file__).resolve().parent / "out"
DEFAULT_ROWS: Final = tuple(
    Row(mode, 8, window, size)
    for size in (1024, 128)
    for mode, window in (("SYNC", 1), ("SYNC", 16), ("ASYNC", 16))
)
_WORKER_SLACK_S: Final = 120.0
_FORK: Final = multiprocessing.get_context("fork")  # children inherit the imports, nothing else


DIALECTS: Final[dict[Kind, Dialect]] = {
    "broker": "remoting",
    "redis": "resp",
    "minimal": "remoting",
}


@dataclass(frozen=True, slots=True)
class Options:
    duration_s: float
    warmup_s: float
    processes: int
    repeat: int
    broker_executable: Path
    profile: bool


def _share_main(
    target: Target,
    load: Load,
    indexes: list[int],
    barrier: Barrier,
    results: multiprocessing.Queue[tuple[str, ShareResult | str]],
) -> None:
    """Body of one generator process: connect, wait for the others, run, report back."""
    try:
        share = Share(target, load, indexes)
        barrier.wait(timeout=60)
        results.put(("ok", share.run(time.monotonic())))
    except Exception as exc:  # any failure voids the row; the parent prints it
        barrier.abort()  # the other generators stop waiting for this one
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def drive(server: Server, target: Target, row: Row, options: Options) -> Figures:
    """Run one row against `server`; sample its memory while the generator runs."""
    load = Load(row.connections, row.window, row.body_size, options.duration_s, options.warmup_s)
    processes = min(options.processes, row.connections)
    results: multiprocessing.Queue[tuple[str, ShareResult | str]] = _FORK.Queue()
    barrier = _FORK.Barrier(processes)
    workers = [
        _FORK.Process(
            target=_share_main,
            args=(target, load, list(range(n, row.connections, processes)), barrier, results),
        )
        for n in range(processes)
    ]
    cpu_before = server.cpu_seconds()
    flushes_before = server.flushes_and_puts()
    for worker in workers:
        worker.start()
    shares: list[ShareResult] = []
    errors: list[str] = []
    # connect + barrier + run + drain are each bounded in the workers; this is the backstop
    deadline = time.monotonic() + options.warmup_s + options.duration_s + _WORKER_SLACK_S
    while len(shares) + len(errors) < processes:
        server.sample_memory()
        try:
            status, payload = results.get(timeout=0.1)
        except queue.Empty:
            if time.monotonic() > deadline:
                errors.extend(["generator timed out"] * (processes - len(shares) - len(errors)))
                for worker in workers:
                    worker.kill()
            elif not any(w.is_alive() for w in workers) and results.empty():
                errors.append("a generator process died")
            continue
        if isinstance(payload, ShareResult):
            shares.append(payload)
        else:
            errors.append(f"{status}: {payload}")
    cpu_s = server.cpu_seconds() - cpu_before
    flushes_after = server.flushes_and_puts()
    for worker in workers:
        worker.join()
    for error in errors:
        print(f"send {server.name} {row.name} VOID {error}", flush=True)
    result = _merge(shares, row, options, len(errors), cpu_s)
    if flushes_before is not None and flushes_after is not None:
        puts = flushes_after[1] - flushes_before[1]
        if puts > 0:
            flushes = flushes_after[0] - flushes_before[0]
            result = dataclasses.replace(result, flushes_per_msg=flushes / puts)
    return result


def _merge(
    shares: list[ShareResult], row: Row, options: Options, extra_failed: int, cpu_s: float
) -> Figures:
    latencies = array("d")
    for share in shares:
        latencies.frombytes(share.latencies_us)
    failed = sum(share.failed for share in shares) + extra_failed
    unanswered = sum(share.unanswered for share in shares)
    first = next((share.first_failure for share in shares if share.first_failure), "")
    if first:
        print(f"  first failed reply: {first}", flush=True)
    replies = sum(share.replies for share in shares)
    cpu_us_msg = cpu_s * 1e6 / replies if replies else 0.0
    return figures(
        latencies.tolist(), failed, unanswered, row, options.duration_s, cpu_us_msg=cpu_us_msg
    )


@contextmanager
def _maybe_profiling(enabled: bool, server: Server, row: Row) -> Iterator[None]:
    if not enabled:
        yield
        return
    path = OUT / f"profile-{row.name}.txt"
    with profiling(server.process.pid, path):
        yield
    print_hot_spots(path)


def _median(runs: list[Figures]) -> Figures:
    return sorted(runs, key=lambda run: run.msgs_s)[len(runs) // 2]


def run_mode(
    mode: FlushMode, kinds: Sequence[Kind], rows: Sequence[Row], options: Options
) -> dict[Kind, dict[str, Figures]]:
    """Start one server of each kind for `mode`, run every row on each in turn, `repeat` times.

    The servers alternate row by row, so drift on the shared machine (other jobs, the disk)
    falls on all of them; the run with the median msgs/s stands for the row. Prints the rows
    and each server's footprint.
    """
    out: dict[Kind, dict[str, Figures]] = {kind: {} for kind in kinds}
    with ExitStack() as stack:
        servers = {
            kind: stack.enter_context(running(kind, mode, OUT / "tmp", options.broker_executable))
            for kind in kinds
        }
        for row in rows:
            runs: dict[Kind, list[Figures]] = {kind: [] for kind in kinds}
            for attempt in range(options.repeat):
                for kind, server in servers.items():
                    target = Target(DIALECTS[kind], "127.0.0.1", server.port)
                    profile = options.profile and kind == "broker" and attempt == 0
                    with _maybe_profiling(profile, server, row):
                        runs[kind].append(drive(server, target, row, options))
            for kind in kinds:
                out[kind][row.name] = _median(runs[kind])
                all_msgs_s = "/".join(str(round(run.msgs_s)) for run in runs[kind])
                print_row(kind, row, out[kind][row.name], all_msgs_s)
        for kind, server in servers.items():
            server.sample_memory()
            fp = server.footprint
            report(
                f"footprint {kind} {mode}",
                idle_rss_mib=fp.idle_rss,
                idle_anon_mib=fp.idle_anon,
                peak_rss_mib=fp.peak_rss,
                peak_anon_mib=fp.peak_anon,
            )
    return out


def _parse_rows(text: str | None) -> list[Row]:
    if not text:
        return list(DEFAULT_ROWS)
    known = {row.name.lower(): row for row in DEFAULT_ROWS}
    rows = []
    for name in text.split(","):
        mode, shape, size = name.strip().split("-")
        connections, window = shape.split("x")
        body = (
            int(size.lower().removesuffix("kib")) * 1024
            if "k" in size.lower()
            else int(size.lower().removesuffix("b"))
        )
        rows.append(
            known.get(name.strip().lower(), Row(mode.upper(), int(connections), int(window), body))
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", help="comma-separated, e.g. SYNC-8x1-1KiB,ASYNC-8x16-128B")
    parser.add_argument("--duration", type=float, default=2.5, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row and server (median)")
    parser.add_argument("--processes", type=int, default=2, help="generator processes")
    parser.add_argument("--no-redis", action="store_true", help="broker rows only")
    parser.add_argument("--no-broker", action="store_true", help="leave the broker out")
    parser.add_argument(
        "--no-minimal", action="store_true", help="leave the minimal Trio server out"
    )
    parser.add_argument("--chart", type=Path, default=OUT / "send.png")
    parser.add_argument("--broker-executable", type=Path, default=BROKER_EXECUTABLE)
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the broker on each row's first run"
    )
    parser.add_argument(
        "--brokers", type=int, help="1..N brokers in one cluster (bench/cluster_send.py)"
    )
    args = parser.parse_args(argv)
    rows = _parse_rows(args.rows)
    if args.brokers is not None:
        print_machine()
        cluster_row = rows[0] if args.rows else Row("ASYNC", 12, 16, 1024)
        cluster_send.run(max(1, args.brokers), cluster_row, args.duration, args.broker_executable)
        return 0
    options = Options(
        args.duration,
        args.warmup,
        args.processes,
        args.repeat,
        args.broker_executable,
        args.profile,
    )
    print_machine()
    with_redis = not args.no_redis and redis_available()
    if not args.no_redis and not with_redis:
        print("redis-server not found (apt-get install -y redis-server): broker rows only")
    kinds: list[Kind] = [] if args.no_broker else ["broker"]
    kinds += ["redis"] if with_redis else []
    kinds += [] if args.no_minimal else ["minimal"]
    by_kind: dict[Kind, dict[str, Figures]] = {kind: {} for kind in kinds}
    for mode in ("SYNC", "ASYNC"):
        mode_rows = [row for row in rows if row.mode == mode]
        if mode_rows and kinds:
            for kind, figures_of_mode in run_mode(mode, kinds, mode_rows, options).items():
                by_kind[kind] |= figures_of_mode
    ours, redis = by_kind.get("broker", {}), by_kind.get("redis", {})
    minimal = by_kind.get("minimal", {})
    for row in rows:
        if row.name in ours:
            print_ratios(row, ours[row.name], redis.get(row.name), minimal.get(row.name))
    print_targets(ours, redis)
    chart(rows, list(by_kind.items()), args.chart)
    print(f"chart {args.chart} {load_average()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
