"""Startup of a test broker: from spawning `rmq-broker serve` to its first acknowledged send.

What the pytest plugin's `rmq_broker` fixture costs each test that uses it: each run spawns a
broker on a fresh temporary store (`rmq_client.broker_process.BrokerProcess`, test settings:
64 MiB segments, a small message index), waits for it to log that it listens, connects and sends
one message to a topic that does not exist yet (created on that send), then stops it. Prints,
over the runs (median, min, max): the time to the broker's first log line (the interpreter
started and the broker's modules imported; from the line's own timestamp), to listening, to the
first acknowledged send, the time a graceful stop takes, and the broker's resident memory once
idle after that send:

    .venv/bin/python bench/startup.py [--runs 10] [--flush-disk-type SYNC_FLUSH]
        [--executable "python -m broker"]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import report, rss_mib
from rmq_client import BrokerOptions, BrokerProcess, Message, open_producer


async def first_send(host: str, port: int) -> None:
    async with open_producer(host, port) as producer:
        await producer.send(Message("StartupBench", b"first"))


def first_log_s(broker: BrokerProcess, spawned_at: float) -> float:
    """Seconds from `spawned_at` (epoch) to the timestamp of the broker's first event."""
    stamp = str(broker.events()[0]["timestamp"])
    return datetime.datetime.fromisoformat(stamp).timestamp() - spawned_at


def one_run(options: BrokerOptions, executable: str | None) -> tuple[float, ...]:
    """Seconds to the first log line, to listening, to the first acknowledged send, to stop;
    idle RSS in MiB."""
    spawned_at = time.time()
    started = time.perf_counter()
    broker = BrokerProcess(options, executable=executable)
    try:
        listening = time.perf_counter()
        trio.run(first_send, broker.host, broker.port)
        acked = time.perf_counter()
        assert broker.pid is not None
        rss = rss_mib(broker.pid)
        broker.stop()
        stopped = time.perf_counter()
    finally:
        broker.close()
    first_log = first_log_s(broker, spawned_at)
    return first_log, listening - started, acked - started, stopped - acked, rss


def summary(name: str, values: list[float], **extra: float | int | str) -> None:
    report(
        name,
        median_ms=statistics.median(values) * 1000,
        min_ms=min(values) * 1000,
        max_ms=max(values) * 1000,
        **extra,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--flush-disk-type", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH"
    )
    parser.add_argument("--executable", default=None, help="command that runs rmq-broker")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    options = BrokerOptions(flush_disk_type=args.flush_disk_type)
    runs = [one_run(options, args.executable) for _ in range(args.runs)]
    flush = args.flush_disk_type
    summary("startup_to_first_log", [r[0] for r in runs], runs=args.runs)
    summary("startup_to_listening", [r[1] for r in runs], runs=args.runs, flush=flush)
    summary("startup_to_first_ack", [r[2] for r in runs], runs=args.runs, flush=flush)
    summary("graceful_stop", [r[3] for r in runs], runs=args.runs)
    rss = [r[4] for r in runs]
    report("idle_rss", median_mib=statistics.median(rss), min_mib=min(rss), max_mib=max(rss))


if __name__ == "__main__":
    main()
