"""Abusive clients against the real daemon: fuzzed frames, slowloris, many idle connections, and
clients that vanish mid-request or mid-response. Well-behaved producers keep being served with
bounded latency, memory stays bounded, and every connection's resources are freed (the broker's
`open_connections` gauge returns to 0). `RMQ_SOAK=1` fuzzes 100,000 frames instead of 10,000."""

from __future__ import annotations

import os
import pathlib
import random
import re
import resource
import socket
import time
import urllib.request
from collections.abc import Iterator

import psutil
import pytest
import trio

from broker.client import Message, SendStatus, open_producer
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from tests.daemon import Daemon

FUZZ_FRAMES = 100_000 if os.environ.get("RMQ_SOAK") else 10_000
FRAMES_PER_CONNECTION = 50
IDLE_CONNECTIONS = 1000
GOOD_LATENCY_LIMIT_S = 1.0


def valid_frame(seq: int) -> bytes:
    fields = {
        "a": "fuzz",
        "b": "Fuzzed",
        "c": "TBW102",
        "d": "4",
        "e": "-1",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": f"TAGS\x01t{seq}\x02KEYS\x01k{seq}",
    }
    command = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, fields, body=b"b" * 64, opaque=seq
    )
    return encode_frame(command)


def mutate(frame: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    data = bytearray(frame)
    if kind == 0:  # flip a few bytes anywhere, length prefix included
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:  # truncate
        data = data[: rng.randrange(1, len(data))]
    elif kind == 2:  # random garbage with a plausible prefix
        data = data[:8] + rng.randbytes(rng.randint(0, 200))
    return bytes(data)  # kind 3: the valid frame itself


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    running = Daemon(tmp_path_factory.mktemp("abuse") / "store", "--metrics-listen", "127.0.0.1:0")
    yield running
    running.process.terminate()
    code = running.finish()
    texts = [str(e.get("text")) for e in running.events if e["event"] == "text"]
    assert code == 0, "\n".join(texts[-60:])


def metrics_port(daemon: Daemon) -> int:
    event = next(e for e in daemon.events if e["event"] == "metrics_listening")
    return int(str(event["port"]))


def open_connections(daemon: Daemon) -> float:
    url = f"http://127.0.0.1:{metrics_port(daemon)}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    match = re.search(r"^rmq_broker_open_connections (\S+)$", text, re.MULTILINE)
    assert match is not None
    return float(match.group(1))


async def wait_connections_freed(daemon: Daemon) -> None:
    with trio.fail_after(20):
        while await trio.to_thread.run_sync(open_connections, daemon) != 0:  # noqa: ASYNC110
            await trio.sleep(0.1)


async def good_producer(port: int, stop: trio.Event, latencies: list[float]) -> None:
    async with open_producer("127.0.0.1", port, timeout_s=10) as client:
        while not stop.is_set():
            started = time.perf_counter()
            result = await client.send(Message("WellBehaved", b"ok"))
            latencies.append(time.perf_counter() - started)
            assert result.status is SendStatus.SEND_OK
            await trio.sleep(0.01)


async def fuzz_connection(port: int, frames: list[bytes]) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        try:
            await stream.send_all(b"".join(frames))
            await stream.send_eof()
            with trio.move_on_after(5):
                while await stream.receive_some(65536):
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the broker closed it on a protocol error: that is the point


async def test_fuzzed_frames_never_crash_and_memory_stays_bounded(daemon: Daemon) -> None:
    rng = random.Random(7)
    rss_before = psutil.Process(daemon.process.pid).memory_info().rss
    latencies: list[float] = []
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(good_producer, daemon.port, stop, latencies)
        sent = 0
        while sent < FUZZ_FRAMES:
            batch = [mutate(valid_frame(sent + i), rng) for i in range(FRAMES_PER_CONNECTION)]
            async with trio.open_nursery() as connections:
                for chunk in (batch[:25], batch[25:]):
                    connections.start_soon(fuzz_connection, daemon.port, chunk)
            sent += len(batch)
        stop.set()
    rss_after = psutil.Process(daemon.process.pid).memory_info().rss
    assert daemon.process.poll() is None
    assert latencies and max(latencies) < GOOD_LATENCY_LIMIT_S
    assert rss_after - rss_before < 64 << 20, (rss_before, rss_after)
    await wait_connections_freed(daemon)
    print(f"fuzzed frames={sent} rss_before_mib={rss_before >> 20} rss_after_mib={rss_after >> 20}")


async def test_slowloris_and_idle_connections_do_not_starve_producers(daemon: Daemon) -> None:
    idle = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(IDLE_CONNECTIONS)]
    slow = socket.create_connection(("127.0.0.1", daemon.port))
    latencies: list[float] = []
    stop = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(good_producer, daemon.port, stop, latencies)
            for byte in valid_frame(1)[:60]:  # one byte every 50 ms for 3 s
                await trio.to_thread.run_sync(slow.sendall, bytes([byte]))
                await trio.sleep(0.05)
            stop.set()
        assert await trio.to_thread.run_sync(open_connections, daemon) >= IDLE_CONNECTIONS
    finally:
        for sock in [*idle, slow]:
            sock.close()
    assert latencies and max(latencies) < GOOD_LATENCY_LIMIT_S
    await wait_connections_freed(daemon)


async def test_clients_vanishing_mid_request_and_mid_response_are_cleaned_up(
    daemon: Daemon,
) -> None:
    frame = valid_frame(5)
    for _ in range(50):
        half = socket.create_connection(("127.0.0.1", daemon.port))
        half.sendall(frame[: len(frame) // 2])  # mid-request
        half.close()
        burst = socket.create_connection(("127.0.0.1", daemon.port))
        burst.sendall(frame * 20)  # 20 requests; gone before reading a single answer
        burst.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        burst.close()  # RST
    await wait_connections_freed(daemon)
    async with open_producer("127.0.0.1", daemon.port) as client:
        result = await client.send(Message("AfterVanishing", b"ok"))
    assert result.status is SendStatus.SEND_OK


def test_daemon_store_is_readable_after_abuse(daemon: Daemon) -> None:
    assert daemon.process.poll() is None
    assert pathlib.Path(daemon.store_dir, "commitlog").is_dir()
