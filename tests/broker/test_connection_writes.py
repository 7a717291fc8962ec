"""How a connection's answers leave: a plain TCP connection is written straight to its
descriptor while the socket has room, and a peer that is gone by the time its answers are ready
is a write failure of that connection alone, never of the broker."""

from __future__ import annotations

import pathlib
import socket
import struct
import threading

import pytest
import trio
from structlog.testing import capture_logs

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from rmq_client.producer import Message, open_producer
from store.mapped_file import MappedFile
from tests.broker.test_send import v1_header
from tests.conftest import make_config, start_broker
from tests.store.conftest import wait_until

TOPIC = "Writes"


def send_frames(count: int) -> bytes:
    return b"".join(
        encode_frame(
            RemotingCommand.request(RequestCode.SEND_MESSAGE, v1_header(TOPIC), b"w", opaque=i)
        )
        for i in range(count)
    )


async def test_a_burst_of_answers_arrives_whole_each_answered_once(
    tmp_path: pathlib.Path,
) -> None:
    config = make_config(tmp_path / "store")
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        async with open_producer("127.0.0.1", broker.port) as client:
            # the topic exists, so the sends below go inline
            await client.send(Message(TOPIC, b"first", queue_id=1))
        stream = await trio.open_tcp_stream("127.0.0.1", broker.port)
        async with stream:
            await stream.send_all(send_frames(64))
            decoder = FrameDecoder()
            answers: list[RemotingCommand] = []
            with trio.fail_after(10):
                while len(answers) < 64:
                    answers.extend(decoder.feed(bytes(await stream.receive_some(1 << 16))))
        await broker.stop()
    assert sorted(a.opaque for a in answers) == list(range(64))
    assert {a.code for a in answers} == {0}
    assert sorted(int(a.ext_fields["queueOffset"]) for a in answers) == list(range(64))


async def test_a_peer_reset_before_its_answers_fails_only_its_own_writes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sync = MappedFile.sync
    held = {"on": False}
    entered, released = threading.Event(), threading.Event()

    def sync(self: MappedFile) -> None:
        if held["on"]:
            entered.set()
            released.wait(10)  # the answers wait for this flush
        real_sync(self)

    monkeypatch.setattr(MappedFile, "sync", sync)
    config = make_config(tmp_path / "store", flush_disk_type="SYNC_FLUSH")
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        async with open_producer("127.0.0.1", broker.port) as client:
            await client.send(Message(TOPIC, b"first", queue_id=1))
            held["on"] = True
            with capture_logs() as logs:
                peer = socket.create_connection(("127.0.0.1", broker.port))
                peer.sendall(send_frames(8))
                await trio.to_thread.run_sync(entered.wait, 10)
                # SO_LINGER 0: close sends a reset, so the broker's writes find the peer gone
                peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                peer.close()
                await trio.sleep(0.2)
                released.set()
                await wait_until(lambda: any(e["event"] == "write_failed" for e in logs))
            held["on"] = False
            after = await client.send(Message(TOPIC, b"after", queue_id=0))
            assert after.queue_offset == 8  # the reset peer's sends were stored all the same
        await broker.stop()
    errors = {e["error"] for e in logs if e["event"] == "write_failed"}
    assert errors <= {"BrokenPipeError", "ConnectionResetError", "BrokenResourceError"}
    assert errors
