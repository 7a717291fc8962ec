"""What a standalone name server costs: route lookups per second and registrations by size.

Starts `namesrv.server.serve` in this process on 127.0.0.1 port 0, registers BROKERS fake
brokers each listing TOPICS topics (all brokers share every topic, so each route merges
BROKERS queue data), then:

- route: GET_ROUTEINFO_BY_TOPIC over C connections, each keeping one request in flight, for
  --seconds; requests/s and the p50/p99 round trip;
- register: one broker re-registering its TOPICS topics with a new data version (the full
  decode and table update a 4.9 broker causes every 30 s), compressed and not; ms per
  registration and body bytes.

    .venv/bin/python bench/namesrv.py [--brokers B] [--topics T] [--connections C] [--seconds S]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, report, rss_mib
from broker.logging import configure_logging
from namesrv.config import NamesrvConfig
from namesrv.server import serve
from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.codes import ResponseCode
from tests.namesrv.fake_broker import (
    NamesrvConnection,
    connect,
    register_request,
    route_request,
)


async def register_all(
    conn: NamesrvConnection, brokers: int, topics: tuple[TopicConfigData, ...]
) -> None:
    """Register the fake brokers on `conn`, which must stay open: closing a broker's
    connection takes it out of the routes."""
    for b in range(brokers):
        addr = f"10.0.{b // 250}.{b % 250}:10911"
        answer = await conn.call(register_request(addr, f"broker-{b}", topics, compressed=True))
        assert answer.code == ResponseCode.SUCCESS, answer.remark


async def route_load(port: int, topics: int, seconds: float, latencies: list[float]) -> None:
    async with connect(port) as conn:
        deadline = time.perf_counter() + seconds
        n = 0
        while (start := time.perf_counter()) < deadline:
            answer = await conn.call(route_request(f"Topic{n % topics}"))
            latencies.append(time.perf_counter() - start)
            assert answer.code == ResponseCode.SUCCESS
            n += 1


async def registration_cost(port: int, topics: tuple[TopicConfigData, ...]) -> None:
    async with connect(port) as conn:
        for compressed in (False, True):
            rounds = 5
            elapsed = 0.0
            size = 0
            for r in range(rounds):
                command = register_request(
                    "10.9.9.9:10911",
                    "broker-reg",
                    topics,
                    version=DataVersion(r + 2, r),
                    compressed=compressed,
                )
                size = len(command.body or b"")
                start = time.perf_counter()
                answer = await conn.call(command, timeout_s=120)
                elapsed += time.perf_counter() - start
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            report(
                "register",
                topics=len(topics),
                compressed=str(compressed).lower(),
                body_bytes=size,
                ms_per_registration=elapsed / rounds * 1000,
            )


async def main(args: argparse.Namespace) -> None:
    topics = tuple(TopicConfigData(f"Topic{i}", 8, 8, 6) for i in range(args.topics))
    configure_logging("warning")
    with tempfile.TemporaryDirectory() as tmp:
        config = NamesrvConfig(listen_port=0, kv_config_path=f"{tmp}/kv.json")
        async with contextlib.AsyncExitStack() as stack, trio.open_nursery() as nursery:
            server = await nursery.start(serve, config)
            registrations = await stack.enter_async_context(connect(server.port))
            start = time.perf_counter()
            await register_all(registrations, args.brokers, topics)
            report(
                "setup",
                brokers=args.brokers,
                topics=args.topics,
                seconds=time.perf_counter() - start,
                rss_mib=rss_mib(),
            )
            latencies: list[float] = []
            async with trio.open_nursery() as load:
                for _ in range(args.connections):
                    load.start_soon(route_load, server.port, args.topics, args.seconds, latencies)
            latencies.sort()
            report(
                "route",
                brokers_per_route=args.brokers,
                connections=args.connections,
                requests_per_s=len(latencies) / args.seconds,
                p50_ms=percentile(latencies, 0.5) * 1000,
                p99_ms=percentile(latencies, 0.99) * 1000,
            )
            await registration_cost(server.port, topics)
            await stack.aclose()
            server.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    trio.run(main, parser.parse_args())
