"""RocketMQ 5 sends through the broker's gRPC service: SendMessage of 1 KiB messages.

A real broker (`rmq-broker serve`, ASYNC_FLUSH) in a child process with its gRPC port open;
grpcio's client sends from this process, one call at a time (latency) and from several threads
on one connection (throughput). Prints messages per second, median and p99 latency per run, and
the broker's resident memory before the first gRPC connection and after the runs:

    .venv/bin/python bench/grpc_send.py [--calls 2000] [--threads 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, report, rss_mib
from rmq_client import BrokerOptions, BrokerProcess

PATH = "/apache.rocketmq.v2.MessagingService/SendMessage"
TOPIC = "BenchGrpcSend"


def _request(n: int) -> bytes:
    from protocol.v2 import load

    definition, service = load()
    message = definition.Message(
        topic=definition.Resource(name=TOPIC),
        body=b"x" * 1024,
        system_properties=definition.SystemProperties(message_id=f"BENCH{n:016X}", tag="T"),
    )
    return bytes(service.SendMessageRequest(messages=[message]).SerializeToString())


def _run(call: Any, calls: int, threads: int) -> tuple[float, list[float]]:
    from protocol.v2 import load

    definition, service = load()
    ok = definition.Code.Value("OK")
    requests = [_request(n) for n in range(calls)]
    latencies: list[float] = []

    def one(request: bytes) -> None:
        started = time.perf_counter()
        answer = service.SendMessageResponse.FromString(call(request, timeout=30))
        latencies.append(time.perf_counter() - started)
        if answer.status.code != ok:
            raise RuntimeError(f"send refused: {answer.status}")

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, requests))
    return calls / (time.perf_counter() - started), sorted(latencies)


def main() -> None:
    import grpc

    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store:
        options = BrokerOptions(config={"grpc_listen": "127.0.0.1:0"})
        with BrokerProcess(options, store_dir=Path(store)) as broker:
            report("broker_idle", rss_mib=rss_mib(broker.pid))
            with grpc.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
                call = channel.unary_unary(PATH)
                _run(call, 50, 1)  # topic creation, warm-up
                for threads in (1, args.threads):
                    rate, latencies = _run(call, args.calls, threads)
                    report(
                        "grpc_send_1k",
                        threads=threads,
                        msgs_per_s=rate,
                        p50_ms=statistics.median(latencies) * 1000,
                        p99_ms=percentile(latencies, 0.99) * 1000,
                    )
            report("broker_after", rss_mib=rss_mib(broker.pid))


if __name__ == "__main__":
    main()
