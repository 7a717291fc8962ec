"""Hostile input against the real daemon: each bad frame is answered or closes only its own
connection, a well-behaved producer keeps being served, and a second broker on the same store
refuses to start."""

from __future__ import annotations

import struct
import subprocess
from collections.abc import Iterator

import pytest
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from rmq_client.producer import Message, SendStatus, open_producer
from tests.daemon import BROKER, Daemon

SEND_FIELDS = {
    "a": "g",
    "b": "Hostile",
    "c": "TBW102",
    "d": "4",
    "e": "0",
    "f": "0",
    "g": "0",
    "h": "0",
}


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def send_v2(**fields: str) -> bytes:
    command = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, {**SEND_FIELDS, **fields}, body=b"x", opaque=7
    )
    return encode_frame(command)


#: name -> (raw bytes, expected response code or None for "the connection is closed")
HOSTILE: dict[str, tuple[bytes, int | None]] = {
    "length_2gib": (struct.pack(">i", 0x7FFFFFFF) + b"\0" * 64, None),
    "negative_length": (struct.pack(">i", -5) + b"\0" * 8, None),
    "header_beyond_frame": (struct.pack(">ii", 8, 1000) + b"{}\0\0", None),
    "json_not_an_object": (json_frame(b"[1, 2, 3]"), None),
    "ext_fields_nested": (
        json_frame(b'{"code":310,"opaque":1,"extFields":{"a":{"x":1}}}'),
        ResponseCode.SYSTEM_ERROR,
    ),
    "opaque_a_float": (json_frame(b'{"code":310,"opaque":1.5}'), None),
    "topic_illegal_chars": (send_v2(b="bad topic!"), ResponseCode.SYSTEM_ERROR),
    "properties_10mb": (send_v2(i="k\x01" + "v" * 10_000_000), ResponseCode.MESSAGE_ILLEGAL),
    "queue_id_not_a_number": (send_v2(e="zero"), ResponseCode.SYSTEM_ERROR),
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    running = Daemon(tmp_path_factory.mktemp("hostile") / "store")
    yield running
    running.process.terminate()
    assert running.finish() == 0


async def hostile_exchange(port: int, payload: bytes) -> RemotingCommand | None:
    """Send `payload`; the first response, or None when the broker closed the connection."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    async with stream:
        try:
            await stream.send_all(payload)
        except trio.BrokenResourceError:
            return None  # closed while we were still writing
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            commands = decoder.feed(data)
            if commands:
                return commands[0]


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_bad_frames_are_answered_or_closed_and_others_still_served(
    daemon: Daemon, name: str
) -> None:
    payload, expected = HOSTILE[name]
    with trio.fail_after(20):
        async with open_producer("127.0.0.1", daemon.port) as good:
            response = await hostile_exchange(daemon.port, payload)
            if expected is None:
                assert response is None, f"{name}: expected a closed connection"
            else:
                assert response is not None, f"{name}: expected an answer"
                assert response.code == expected
                assert response.remark
            result = await good.send(Message("StillServed", name.encode()))
            assert result.status is SendStatus.SEND_OK
    assert daemon.process.poll() is None


def test_second_broker_on_the_same_store_refuses_to_start(daemon: Daemon) -> None:
    second = subprocess.run(
        [*BROKER, "serve", "--listen", "127.0.0.1:0", "--store-dir", str(daemon.store_dir)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert second.returncode != 0
    assert "lock" in second.stderr.lower()
    assert "Traceback" not in second.stderr
    assert daemon.process.poll() is None
