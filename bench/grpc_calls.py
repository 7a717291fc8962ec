"""The gRPC server's own cost per call: unary echo calls of a small message, and 64 KiB ones.

The server (broker.grpc.server with one echo method, no broker behind it) runs in a child
process on 127.0.0.1; grpcio's client calls it from this one, one call at a time (latency) and
from several threads at once (throughput), on one connection. Prints calls per second,
median and p99 latency per run, and the server's resident memory before its first connection
and after the runs:

    .venv/bin/python bench/grpc_calls.py [--calls 2000] [--threads 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, report, rss_mib
from broker.config import BrokerConfig
from broker.grpc.methods import CallContext, Kind, Method, MethodTable
from broker.grpc.server import GrpcServer

PATH = "/bench.Echo/Unary"


def _methods() -> MethodTable:
    from protocol.v2 import load

    definition, _ = load()

    async def echo(request: Any, context: CallContext) -> Any:
        return request

    return {PATH: Method(Kind.UNARY, definition.Resource, echo)}


def _serve(pipe: Connection) -> None:
    async def main() -> None:
        server = GrpcServer(BrokerConfig(), _methods)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run, listeners)
            pipe.send(server.port)
            await trio.to_thread.run_sync(pipe.recv)  # the parent says stop
            server.shutdown(1.0)

    trio.run(main)


def _run(stub: Any, request: Any, calls: int, threads: int) -> tuple[float, list[float]]:
    latencies: list[float] = []

    def one(_: int) -> None:
        started = time.perf_counter()
        stub(request, timeout=30)
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(calls)))
    return time.perf_counter() - started, sorted(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    import grpc

    from protocol.v2 import load

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,))
    server.start()
    port = parent.recv()
    report("grpc_server_idle", rss_mib=rss_mib(server.pid))
    definition, _ = load()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = channel.unary_unary(
            PATH,
            request_serializer=definition.Resource.SerializeToString,
            response_deserializer=definition.Resource.FromString,
        )
        for size in (16, 64 * 1024):
            request = definition.Resource(name="x" * size)
            _run(stub, request, 100, 1)  # warm up
            for threads in (1, args.threads):
                elapsed, latencies = _run(stub, request, args.calls, threads)
                report(
                    "grpc_unary_echo",
                    bytes=size,
                    threads=threads,
                    calls_per_s=args.calls / elapsed,
                    median_ms=statistics.median(latencies) * 1000,
                    p99_ms=percentile(latencies, 0.99) * 1000,
                )
    report("grpc_server_after", rss_mib=rss_mib(server.pid))
    parent.send("stop")
    server.join(30)


if __name__ == "__main__":
    main()
