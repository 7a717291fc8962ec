"""Abusive clients against the real daemon: fuzzed frames, slowloris, many idle connections, and
clients that vanish mid-request or mid-response. Well-behaved producers keep being served with
bounded latency, memory stays bounded, and every connection's resources are freed (the broker's
`open_connections` gauge returns to 0). `RMQ_SOAK=1` fuzzes 100,000 frames instead of 10,000."""

from __future__ import annotations

import os
import random
import re
import resource
import socket
import urllib.request
from collections.abc import Iterator

import psutil
import pytest
import trio

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from store.reader import CommitLogReader
from tests.daemon import Daemon

FUZZ_FRAMES = 100_000 if os.environ.get("RMQ_SOAK") else 10_000
FRAMES_PER_CONNECTION = 50
IDLE_CONNECTIONS = 1000
#: a send of the well-behaved producer not answered within this is starved (a generous bound:
#: how fast it is answered is a matter for bench/)
GOOD_DEADLINE_S = 10.0


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
    if running.process.poll() is None:  # the last test stops it and reads its store
        running.process.terminate()
        code = running.finish()
    else:
        code = running.process.returncode
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


class GoodProducer:
    """A well-behaved producer beside the abuse: every send must be answered SEND_OK within
    `GOOD_DEADLINE_S`; the abuse waits for its next answer before each step (`served()`), so
    it is served all through the abuse, whatever the speed of the machine."""

    def __init__(self, port: int, acked: dict[int, bytes]) -> None:
        self.port = port
        self.acked = acked
        self.answers = 0
        self._answered = trio.Event()
        self._stop = trio.Event()

    async def run(self) -> None:
        async with open_producer("127.0.0.1", self.port, timeout_s=GOOD_DEADLINE_S) as client:
            while not self._stop.is_set():
                body = b"ok-%d" % len(self.acked)
                with trio.fail_after(GOOD_DEADLINE_S):
                    result = await client.send(Message("WellBehaved", body))
                assert result.status is SendStatus.SEND_OK
                self.acked[decode_offset_msg_id(result.offset_msg_id)[2]] = body
                self.answers += 1
                self._answered.set()
                self._answered = trio.Event()
                await trio.sleep(0.01)

    async def served(self) -> None:
        """Return at the producer's next answer."""
        with trio.fail_after(GOOD_DEADLINE_S):
            await self._answered.wait()

    def stop(self) -> None:
        self._stop.set()

    @staticmethod
    async def send_some(port: int, acked: dict[int, bytes], count: int) -> None:
        good = GoodProducer(port, acked)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(good.run)
            for _ in range(count):
                await good.served()
            good.stop()


@pytest.fixture(scope="module")
def acked() -> dict[int, bytes]:
    """Physical offset -> body of every message acknowledged to the well-behaved producers."""
    return {}


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


async def test_fuzzed_frames_never_crash_and_memory_stays_bounded(
    daemon: Daemon, acked: dict[int, bytes]
) -> None:
    rng = random.Random(7)
    rss_before = psutil.Process(daemon.process.pid).memory_info().rss
    good = GoodProducer(daemon.port, acked)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(good.run)
        sent = 0
        while sent < FUZZ_FRAMES:
            await good.served()  # answered between every two batches of fuzzed frames
            batch = [mutate(valid_frame(sent + i), rng) for i in range(FRAMES_PER_CONNECTION)]
            async with trio.open_nursery() as connections:
                for chunk in (batch[:25], batch[25:]):
                    connections.start_soon(fuzz_connection, daemon.port, chunk)
            sent += len(batch)
        await good.served()
        good.stop()
    rss_after = psutil.Process(daemon.process.pid).memory_info().rss
    assert daemon.process.poll() is None
    assert good.answers > FUZZ_FRAMES // FRAMES_PER_CONNECTION
    assert rss_after - rss_before < 64 << 20, (rss_before, rss_after)
    await wait_connections_freed(daemon)
    print(f"fuzzed frames={sent} rss_before_mib={rss_before >> 20} rss_after_mib={rss_after >> 20}")


async def test_slowloris_and_idle_connections_do_not_starve_producers(
    daemon: Daemon, acked: dict[int, bytes]
) -> None:
    idle = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(IDLE_CONNECTIONS)]
    slow = socket.create_connection(("127.0.0.1", daemon.port))
    good = GoodProducer(daemon.port, acked)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(good.run)
            for byte in valid_frame(1)[:60]:  # one byte per answer to the good producer
                await trio.to_thread.run_sync(slow.sendall, bytes([byte]))
                await good.served()
            good.stop()
        assert await trio.to_thread.run_sync(open_connections, daemon) >= IDLE_CONNECTIONS
    finally:
        for sock in [*idle, slow]:
            sock.close()
    assert good.answers >= 60
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


def test_daemon_store_is_readable_after_abuse(daemon: Daemon, acked: dict[int, bytes]) -> None:
    """Last: stop the abused broker and read its store. Every record passes its CRC, and every
    message acknowledged to a well-behaved producer (here, and in the tests before when they
    ran) is stored at its offset with its body."""
    assert daemon.process.poll() is None
    trio.run(GoodProducer.send_some, daemon.port, acked, 20)
    assert daemon.stop() == 0
    with CommitLogReader(str(daemon.store_dir)) as reader:
        records = list(reader.iter_records(reader.min_offset, verify_crc=True))
    assert records and all(r.crc_ok is not False for r in records)
    stored = {r.physical_offset: r.body for r in records}
    missing = {o: b for o, b in acked.items() if stored.get(o) != b}
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages not stored"
