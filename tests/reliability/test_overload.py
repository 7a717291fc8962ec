"""A flood beyond the store's writer queue, against the real daemon.

Many connections keep hundreds of sends in flight while the writer channel holds only a few: the
overflow is answered SYSTEM_BUSY with the `[OVERLOAD]` remark naming the limit, counted in
`rmq_broker_system_busy_total`; every acknowledged message is stored at its offset, no refused one
is, a well-behaved producer on its own connection keeps being served (every flood round waits
for its next answer, each answer within a generous deadline), and the connection gauge returns to
0 once the clients leave.
"""

from __future__ import annotations

import pathlib
import re
import time
import urllib.request

import trio

from protocol.codes import ResponseCode
from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendError, SendStatus, open_producer
from tests.reliability.conftest import SOAK, Daemon, read_records

FLOOD_CONNECTIONS = 8
IN_FLIGHT_PER_CONNECTION = 64
ROUNDS = 40 if SOAK else 6
#: a send of the well-behaved producer not answered within this hangs
GOOD_DEADLINE_S = 20.0


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


class WellBehaved:
    """One send at a time on its own connection; `answered()` returns at its next answer."""

    def __init__(self, port: int, tally: Tally) -> None:
        self.port = port
        self.tally = tally
        self.answers = 0
        self.stop = trio.Event()
        self._answer = trio.Event()

    async def answered(self) -> None:
        with trio.fail_after(GOOD_DEADLINE_S):
            await self._answer.wait()

    async def run(self) -> None:
        async with open_producer("127.0.0.1", self.port, timeout_s=GOOD_DEADLINE_S) as client:
            while not self.stop.is_set():
                body = f"good-{self.answers}".encode()
                try:
                    result = await client.send(Message("Good", body))
                except SendError as refused:  # global overload may reach it too, never a hang
                    assert refused.code == ResponseCode.SYSTEM_BUSY
                    self.tally.refused.append(body)
                else:
                    assert result.status is SendStatus.SEND_OK
                    self.tally.acked[decode_offset_msg_id(result.offset_msg_id)[2]] = body
                self.answers += 1
                self._answer.set()
                self._answer = trio.Event()
                await trio.sleep(0.005)


async def flood(port: int, index: int, tally: Tally, good: WellBehaved) -> None:
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
            await good.answered()  # served between every two rounds of the flood
            async with trio.open_nursery() as nursery:
                for slot in range(IN_FLIGHT_PER_CONNECTION):
                    nursery.start_soon(one, round_ * IN_FLIGHT_PER_CONNECTION + slot)


async def run_flood(port: int, tally: Tally) -> int:
    """The flood beside a well-behaved producer; how many answers the latter got."""
    good = WellBehaved(port, tally)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(good.run)
            async with trio.open_nursery() as flooders:
                for index in range(FLOOD_CONNECTIONS):
                    flooders.start_soon(flood, port, index, tally, good)
            good.stop.set()
    return good.answers


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
    good_answers = trio.run(run_flood, daemon.port, tally)
    assert tally.refused, "the flood never overflowed a 4-slot writer queue"
    assert all("[OVERLOAD]" in r and "put_queue_capacity" in r for r in tally.remarks), (
        tally.remarks
    )
    assert good_answers >= ROUNDS
    text = scrape(metrics_port)
    busy = metric(text, r'rmq_broker_system_busy_total\{reason="writer_queue_full"\}')
    assert busy == len(tally.refused)
    deadline = time.monotonic() + 20  # a generous deadline for the gauge to fall to 0
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
    print(f"flood acked={len(tally.acked)} refused_busy={len(tally.refused)} good={good_answers}")
