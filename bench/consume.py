"""End-to-end latency through a long-polling pull, and pull throughput beside send throughput.

Starts `rmq-broker serve` (a subprocess, loopback, a fresh store) and measures, for 1 KiB
messages:

* **latency**: one producer sends at a fixed rate (1,000 msgs/s by default) to one queue while a
  consumer keeps a long-polling pull open on it; each body carries its send time, so the figure
  is send call -> message decoded by the consumer (p50 / p99 / max).
* **throughput**: `--messages` messages sent as fast as 8 connections x 16 in-flight sends go
  (send msgs/s), then read back by one consumer pulling the 4 queues concurrently, 32 messages a
  pull (pull msgs/s).

Targets: p99 under 10 ms at 1k msgs/s; pull throughput at least 2x send throughput.
Usage: `python bench/consume.py [--flush-disk-type SYNC_FLUSH|ASYNC_FLUSH] [--rate 1000]
[--seconds 5] [--messages 50000]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import trio

from bench._common import percentile, report, rss_mib
from rmq_client.producer import Message, Producer, open_producer
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer

BODY_SIZE = 1024
QUEUES = 4
GROUP = "bench-consume"


def start_broker(store_dir: str, flush_disk_type: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            store_dir,
            "--flush-disk-type",
            flush_disk_type,
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == "listening":
            # keep reading its log, or a full pipe would stall the broker
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, int(event["port"])
    raise RuntimeError("the broker exited before listening")


def body(sent_ns: int) -> bytes:
    return str(sent_ns).encode().ljust(BODY_SIZE, b".")


async def latency(port: int, rate: int, seconds: float) -> list[float]:
    """Send at `rate` to queue 0 while a long-polling pull reads it; latencies in ms."""
    count = int(rate * seconds)
    latencies: list[float] = []
    async with (
        open_producer("127.0.0.1", port) as producer,
        open_pull_consumer("127.0.0.1", port, GROUP, client_id="bench-latency") as consumer,
    ):
        await producer.send(Message("BenchLatency", body(time.time_ns()), queue_id=0))
        await consumer.subscribe("BenchLatency")
        start = await consumer.max_offset("BenchLatency", 0)

        async def read() -> None:
            offset = start
            while len(latencies) < count:
                result = await consumer.pull("BenchLatency", 0, offset, suspend_ms=5000)
                now = time.time_ns()
                for record in result.records:
                    assert record.body is not None
                    latencies.append((now - int(record.body.split(b".", 1)[0])) / 1e6)
                offset = result.next_begin_offset

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.sleep(0.2)  # the pull is held by now
            interval = 1 / rate
            due = trio.current_time()
            for _ in range(count):
                await producer.send(Message("BenchLatency", body(time.time_ns()), queue_id=0))
                due += interval
                await trio.sleep_until(due)
    return sorted(latencies)


async def send_throughput(port: int, messages: int) -> float:
    payload = b"x" * BODY_SIZE
    per_task = messages // (8 * 16)
    started = time.perf_counter()

    async def connection(index: int) -> None:
        async with open_producer("127.0.0.1", port) as producer, trio.open_nursery() as nursery:
            for task in range(16):
                nursery.start_soon(sender, producer, (index * 16 + task) % QUEUES)

    async def sender(producer: Producer, queue_id: int) -> None:
        for _ in range(per_task):
            await producer.send(Message("BenchThroughput", payload, queue_id=queue_id))

    async with trio.open_nursery() as nursery:
        for index in range(8):
            nursery.start_soon(connection, index)
    return per_task * 8 * 16 / (time.perf_counter() - started)


async def pull_throughput(port: int) -> tuple[float, int]:
    async with open_pull_consumer("127.0.0.1", port, GROUP, client_id="bench-pull") as consumer:
        await consumer.subscribe("BenchThroughput")
        totals = [0] * QUEUES
        started = time.perf_counter()

        async def drain(consumer: PullConsumer, queue_id: int) -> None:
            end = await consumer.max_offset("BenchThroughput", queue_id)
            offset = 0
            while offset < end:
                result = await consumer.pull("BenchThroughput", queue_id, offset, max_nums=32)
                totals[queue_id] += len(result.records)
                offset = result.next_begin_offset

        async with trio.open_nursery() as nursery:
            for queue_id in range(QUEUES):
                nursery.start_soon(drain, consumer, queue_id)
        total = sum(totals)
        return total / (time.perf_counter() - started), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flush-disk-type", default="ASYNC_FLUSH")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--messages", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="consume-bench-") as store_dir:
        process, port = start_broker(store_dir, args.flush_disk_type)
        try:
            lat = trio.run(latency, port, args.rate, args.seconds)
            report(
                "consume_latency",
                mode=args.flush_disk_type,
                rate=args.rate,
                messages=len(lat),
                p50_ms=percentile(lat, 0.5),
                p99_ms=percentile(lat, 0.99),
                max_ms=lat[-1] if lat else 0.0,
                target_p99_ms=10.0,
                verdict="MET" if percentile(lat, 0.99) < 10.0 else "MISS",
            )
            send_rate = trio.run(send_throughput, port, args.messages)
            pull_rate, pulled = trio.run(pull_throughput, port)
            report(
                "consume_throughput",
                mode=args.flush_disk_type,
                send_msgs_s=send_rate,
                pull_msgs_s=pull_rate,
                pulled=pulled,
                pull_over_send=pull_rate / send_rate,
                verdict="MET" if pull_rate >= 2 * send_rate else "MISS",
                broker_rss_mib=rss_mib(process.pid),
            )
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
