"""Replication: SYNC_MASTER's ack latency and throughput, and a slave's catch-up rate, each as a
ratio to a lone broker measured in the same run.

Every broker is a real `rmq-broker serve` subprocess on loopback with a fresh directory.

    send rows   C producers x sequential 1 KiB sends for D seconds, to a lone ASYNC_MASTER and
                to a SYNC_MASTER whose slave must report each message before it is answered;
                msgs/s, p50/p99 ack latency, and sync/lone ratios (latency added by the slave)
    catch-up    a lone master is filled with M MiB (its ingest rate is the reference), then an
                empty slave connects and copies it; MiB/s of the copy and copy/ingest ratio

    .venv/bin/python bench/ha.py [--producers 8] [--duration 5] [--catch-up-mib 256]
        [--flush-disk-type ASYNC_FLUSH]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, report
from rmq_client.admin import open_admin
from rmq_client.producer import Message, SendStatus, open_producer

BODY = b"h" * 1024
SERVE = [
    sys.executable,
    "-m",
    "broker",
    "serve",
    "--listen",
    "127.0.0.1:0",
    "--grpc-listen",
    "none",
]
#: segments large enough that the catch-up data sits in the first one (a slave that starts
#: empty copies from the start of the master's last segment)
SEGMENT = str(512 << 20)


class Broker:
    """`rmq-broker serve` in a subprocess; its JSON log events arrive on a queue."""

    def __init__(self, store_dir: str, env: Mapping[str, str]) -> None:
        environ = {
            **os.environ,
            "RMQ_LOG_LEVEL": "info",
            "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": SEGMENT,
            **env,
        }
        self.process = subprocess.Popen(
            [*SERVE, "--store-dir", store_dir],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        self.events: queue.Queue[dict[str, object]] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.seen: list[dict[str, object]] = []
        self.ha_port = int(str(self.wait_for("ha_listening", "listening").get("port", 0)))
        self.port = int(str(self.wait_for("listening")["port"]))

    def wait_for(self, name: str, stop_at: str | None = None) -> dict[str, object]:
        """The first event `name` (seen already or to come); {} when `stop_at` comes first."""
        for event in self.seen:
            if event.get("event") == name:
                return event
        while True:
            event = self.events.get(timeout=60)
            self.seen.append(event)
            if event.get("event") == name:
                return event
            if event.get("event") == stop_at:
                return {}

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                continue

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


@contextmanager
def brokers() -> Iterator[list[Broker]]:
    started: list[Broker] = []
    try:
        yield started
    finally:
        for broker in started:
            broker.stop()


async def send_load(port: int, producers: int, duration_s: float) -> tuple[float, list[float]]:
    """msgs/s and every ack latency (ms) of `producers` sequential senders for `duration_s`."""
    latencies: list[float] = []
    deadline = time.perf_counter() + duration_s

    async def producer(index: int) -> None:
        async with open_producer("127.0.0.1", port, timeout_s=30) as client:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                result = await client.send(Message(f"HaBench{index % 4}", BODY))
                assert result.status is SendStatus.SEND_OK, result.status
                latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(producers):
            nursery.start_soon(producer, index)
    return len(latencies) / (time.perf_counter() - started), sorted(latencies)


async def max_offset(port: int) -> int:
    async with open_admin("127.0.0.1", port) as admin:
        return int((await admin.runtime_info())["commitLogMaxOffset"])


async def fill(port: int, mib: int) -> float:
    """Send `mib` MiB of 1 KiB messages over 8 connections; MiB/s of the ingest."""
    count = mib * 1024 // 8
    started = time.perf_counter()

    async def producer() -> None:
        async with open_producer("127.0.0.1", port, timeout_s=30) as client:
            for _ in range(count):
                message = Message("HaFill", BODY, wait_store_msg_ok=False)
                assert (await client.send(message)).status is SendStatus.SEND_OK

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(producer)
    return (await max_offset(port)) / (1 << 20) / (time.perf_counter() - started)


def send_rows(root: str, args: argparse.Namespace) -> None:
    flush = {"RMQ_FLUSH_DISK_TYPE": args.flush_disk_type}
    rows = {}
    with brokers() as started:
        lone = Broker(f"{root}/lone", {**flush, "RMQ_BROKER_ROLE": "ASYNC_MASTER"})
        started.append(lone)
        rows["lone"] = trio.run(send_load, lone.port, args.producers, args.duration)
    with brokers() as started:
        master = Broker(f"{root}/master", {**flush, "RMQ_BROKER_ROLE": "SYNC_MASTER"})
        started.append(master)
        slave_env = {
            **flush,
            "RMQ_BROKER_ROLE": "SLAVE",
            "RMQ_HA_MASTER_ADDRESS": f"127.0.0.1:{master.ha_port}",
        }
        started.append(Broker(f"{root}/slave", slave_env))
        master.wait_for("ha_transfer_started")
        rows["sync_master"] = trio.run(send_load, master.port, args.producers, args.duration)
    for name, (rate, latencies) in rows.items():
        report(
            f"ha_send {name}",
            flush=args.flush_disk_type,
            producers=args.producers,
            msgs_per_s=rate,
            p50_ms=percentile(latencies, 0.5),
            p99_ms=percentile(latencies, 0.99),
        )
    (lone_rate, lone_lat), (sync_rate, sync_lat) = rows["lone"], rows["sync_master"]
    report(
        "ha_send ratio sync_master/lone",
        throughput=sync_rate / lone_rate,
        p50=percentile(sync_lat, 0.5) / percentile(lone_lat, 0.5),
        p99=percentile(sync_lat, 0.99) / percentile(lone_lat, 0.99),
    )


def catch_up_row(root: str, mib: int) -> None:
    with brokers() as started:
        master = Broker(f"{root}/fill", {"RMQ_BROKER_ROLE": "ASYNC_MASTER"})
        started.append(master)
        ingest = trio.run(fill, master.port, mib)
        target = trio.run(max_offset, master.port)
        slave_env = {
            "RMQ_BROKER_ROLE": "SLAVE",
            "RMQ_HA_MASTER_ADDRESS": f"127.0.0.1:{master.ha_port}",
        }
        slave = Broker(f"{root}/copy", slave_env)
        started.append(slave)
        slave.wait_for("ha_master_connected")
        began = time.perf_counter()
        while trio.run(max_offset, slave.port) < target:
            time.sleep(0.05)
        copy = target / (1 << 20) / (time.perf_counter() - began)
    report("ha_catch_up", mib=mib, ingest_mib_per_s=ingest, copy_mib_per_s=copy)
    report("ha_catch_up ratio copy/ingest", rate=copy / ingest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--catch-up-mib", type=int, default=256)
    parser.add_argument("--flush-disk-type", default="ASYNC_FLUSH")
    args = parser.parse_args()
    with ExitStack() as stack:
        root = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ha-"))
        send_rows(root, args)
        catch_up_row(root, args.catch_up_mib)


if __name__ == "__main__":
    main()
