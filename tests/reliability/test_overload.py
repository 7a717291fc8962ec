"""A flood beyond the store's writer queue, against the real daemon.

Many connections keep hundreds of sends in flight while the writer channel holds only a few: the
overflow is answered SYSTEM_BUSY with the `[OVERLOAD]` remark naming the limit, counted in
`rmq_broker_system_busy_total`; every acknowledged message is stored at its offset, no refused one
is, a well-behaved producer on its own connection keeps being served with bounded latency, and the
connection gauge returns to 0 once the clients leave.
"""

from __future__ import annotations

import pathlib
import re
import time
import urllib.request

import trio

from broker.client import Message, SendError, SendStatus, open_producer
from protocol.codes import ResponseCode
from protocol.msgid import decode_offset_msg_id
from tests.reliability.conftest import SOAK, Daemon, read_records

FLOOD_CONNECTIONS = 8
IN_FLIGHT_PER_CONNECTION = 64
ROUNDS = 40 if SOAK else 6
GOOD_LATENCY_LIMIT_S = 2.0


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
    return text


def metric(text: str, pattern: str) -> float:
    match = re.search(rf"^{pattern} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


class Tally:
    def __init__(self) -> None:
        self.acked: dict[int, bytes] = {}
        self.refused: list[bytes] = []
        self.remarks: set[str] = set()


async def flood(port: int, index: int, tally: Tally) -> None:
    async with open_producer("127.0.0.1", port, timeout_s=30) as client:

        async def one(seq: int) -> None:
            body = f"flood-{index}-{seq}".encode()
            try:
                result = await client.send(Message("Flood", body))
            except SendError as refused:
                assert refused.code == ResponseCode.SYSTEM_BUSY, refused
                tally.refused.append(body)
                tally.remarks.add(refused.remark or "")
                return
            tally.acked[decode_offset_msg_id(result.offset_msg_id)[2]] = body

        for round_ in range(ROUNDS):
            async with trio.open_nursery() as nursery:
                for slot in range(IN_FLIGHT_PER_CONNECTION):
                    nursery.start_soon(one, round_ * IN_FLIGHT_PER_CONNECTION + slot)


async def well_behaved(port: int, stop: trio.Event, latencies: list[float], tally: Tally) -> None:
    async with open_producer("127.0.0.1", port, timeout_s=10) as client:
        seq = 0
        while not stop.is_set():
            body = f"good-{seq}".encode()
            started = time.monotonic()
            try:
                result = await client.send(Message("Good", body))
            except SendError as refused:  # global overload may reach it too, but never a hang
                assert refused.code == ResponseCode.SYSTEM_BUSY
                tally.refused.append(body)
            else:
                assert result.status is SendStatus.SEND_OK
                tally.acked[decode_offset_msg_id(result.offset_msg_id)[2]] = body
            latencies.append(time.monotonic() - started)
            seq += 1
            await trio.sleep(0.005)


async def run_flood(port: int, tally: Tally, latencies: list[float]) -> None:
    stop = trio.Event()
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(well_behaved, port, stop, latencies, tally)
            async with trio.open_nursery() as flooders:
                for index in range(FLOOD_CONNECTIONS):
                    flooders.start_soon(flood, port, index, tally)
            stop.set()


def test_flood_beyond_the_writer_queue_is_refused_busy_and_nothing_refused_is_stored(
    store_dir: pathlib.Path, daemons: list[Daemon]
) -> None:
    daemon = Daemon(
        store_dir,
        "--flush-disk-type",
        "SYNC_FLUSH",
        "--metrics-listen",
        "127.0.0.1:0",
        env={"RMQ_PUT_QUEUE_CAPACITY": "4"},
    )
    daemons.append(daemon)
    metrics_port = int(str(daemon.event("metrics_listening")["port"]))
    tally = Tally()
    latencies: list[float] = []
    trio.run(run_flood, daemon.port, tally, latencies)
    assert tally.refused, "the flood never overflowed a 4-slot writer queue"
    assert all("[OVERLOAD]" in r and "put_queue_capacity" in r for r in tally.remarks), (
        tally.remarks
    )
    assert latencies and max(latencies) < GOOD_LATENCY_LIMIT_S, max(latencies)
    text = scrape(metrics_port)
    busy = metric(text, r'rmq_broker_system_busy_total\{reason="writer_queue_full"\}')
    assert busy == len(tally.refused)
    deadline = time.monotonic() + 20
    while metric(scrape(metrics_port), "rmq_broker_open_connections") != 0:
        assert time.monotonic() < deadline, "connections were not freed"
        time.sleep(0.1)
    assert daemon.process.poll() is None
    stored = read_records(daemon.store_dir)
    by_offset = {r.physical_offset: r.body for r in stored}
    assert all(by_offset.get(o) == body for o, body in tally.acked.items())
    stored_bodies = {r.body for r in stored}
    assert not stored_bodies & set(tally.refused), "a refused message was stored"
    assert len(stored) == len(tally.acked)
    assert daemon.stop() == 0
    print(
        f"flood acked={len(tally.acked)} refused_busy={len(tally.refused)} "
        f"good_max_latency_ms={max(latencies) * 1000:.0f}"
    )
