"""CONSUMER_SEND_MSG_BACK with offsets a consumer never received, against the real daemon with
its default 1 GiB segments (issue #26, finding 1).

A stored body is crafted to look like record headers claiming about 1 GiB (one of them even
carries its own physical offset, as an attacker who counts the log's bytes can arrange). Twenty
send backs naming those offsets and other bad ones are pipelined on one connection. Each is
answered "look message by offset failed", another connection's send is answered within
`OTHER_SEND_DEADLINE_S` while they run, and the broker's anonymous memory never grows by more
than `RSS_GROWTH_LIMIT` (it grew by a gigabyte a frame when the size at the offset was trusted).
"""

from __future__ import annotations

import pathlib
import struct
import time
from collections.abc import Iterator

import psutil
import pytest
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import ConsumerSendMsgBackRequestHeader
from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from store.layout import HEADER_V4, MESSAGE_MAGIC_CODE, PHYSICALOFFSET_POS
from tests.daemon import Daemon

GIB = 1 << 30
FRAMES = 20
OTHER_SEND_DEADLINE_S = 2.0
RSS_GROWTH_LIMIT = 64 << 20


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    # the default segment size, 1 GiB: the crafted headers claim nearly that much
    running = Daemon(tmp_path / "store", env={"RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(GIB)})
    yield running
    assert running.stop() == 0, running.text()


def fake_header(size: int, physical_offset: int) -> bytes:
    """The first bytes of a record header: TOTALSIZE, MAGICCODE, then PHYSICALOFFSET."""
    head = bytearray(PHYSICALOFFSET_POS + 8)
    struct.pack_into(">ii", head, 0, size, MESSAGE_MAGIC_CODE)
    struct.pack_into(">q", head, PHYSICALOFFSET_POS, physical_offset)
    return bytes(head)


def crafted_body(body_at: int) -> bytes:
    """A body holding two fake headers claiming about 1 GiB; the second one, at body position
    64, names its own commit-log offset when the body is stored at `body_at`."""
    return (
        fake_header(GIB - 4096, 0)
        + bytes(64 - PHYSICALOFFSET_POS - 8)
        + fake_header(GIB - 8192, body_at + 64)
        + bytes(64)
    )


def send_back_frame(offset: int, opaque: int) -> bytes:
    header = ConsumerSendMsgBackRequestHeader(offset, "hostile-group", 1)
    command = RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields(), opaque=opaque
    )
    return encode_frame(command)


def anonymous_rss(process: psutil.Process) -> int:
    """Resident memory that is not file-backed: what copying out of the mapping allocates."""
    info = process.memory_info()
    return int(info.rss - info.shared)


async def sample_peak(process: psutil.Process, peak: list[int], stop: trio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], anonymous_rss(process))
        await trio.sleep(0.005)


async def read_answers(stream: trio.SocketStream, count: int) -> list[RemotingCommand]:
    decoder = FrameDecoder()
    answers: list[RemotingCommand] = []
    while len(answers) < count:
        data = await stream.receive_some(65536)
        assert data, f"closed after {len(answers)} answers"
        answers.extend(decoder.feed(bytes(data)))
    return answers


async def test_send_backs_naming_crafted_offsets_neither_stall_nor_grow_the_broker(
    daemon: Daemon,
) -> None:
    async with open_producer("127.0.0.1", daemon.port, timeout_s=30) as producer:
        # Where the crafted record will stand is predictable: two probes of the same length
        # give a record's size, and the next record follows the second one.
        probes = [await producer.send(Message("Work", crafted_body(0))) for _ in range(2)]
        first, second = (decode_offset_msg_id(p.offset_msg_id)[2] for p in probes)
        crafted_record = second + (second - first)
        body_at = crafted_record + HEADER_V4.size
        sent = await producer.send(Message("Work", crafted_body(body_at)))
        assert decode_offset_msg_id(sent.offset_msg_id)[2] == crafted_record
        bad = [body_at, body_at + 64, crafted_record + 1, -1, 10**15, first + 4 * GIB]
        offsets = [bad[i % len(bad)] for i in range(FRAMES)]

        process = psutil.Process(daemon.process.pid)
        before = anonymous_rss(process)
        peak = [before]
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_peak, process, peak, stop)
            stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            async with stream:
                await stream.send_all(
                    b"".join(send_back_frame(o, 100 + i) for i, o in enumerate(offsets))
                )
                started = time.perf_counter()
                with trio.fail_after(OTHER_SEND_DEADLINE_S):
                    other = await producer.send(Message("Other", b"still served"))
                other_s = time.perf_counter() - started
                with trio.fail_after(30):
                    answers = await read_answers(stream, FRAMES)
            stop.set()
    assert other.status is SendStatus.SEND_OK and other_s < OTHER_SEND_DEADLINE_S
    assert sorted(a.opaque for a in answers) == list(range(100, 100 + FRAMES))
    for answer, offset in zip(sorted(answers, key=lambda a: a.opaque), offsets, strict=True):
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == f"look message by offset failed, {offset}"
    assert peak[0] - before < RSS_GROWTH_LIMIT, (before, peak[0])
