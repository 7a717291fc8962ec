"""Hostile frames against the real daemon, one connection each: a frame-level fault (impossible
length, header beyond the frame, a header that is not a JSON object, an opaque that is not an
int32, an unknown serialize type) closes that connection; a request-level one (illegal topic, a
10 MB properties string, numbers that are not numbers, a header field or extFields value of the
wrong JSON type) is answered with a code and a remark and the connection stays usable. Either way
the broker logs exactly one event for that connection, naming what was wrong, and a producer on
another connection is served throughout.
"""

from __future__ import annotations

import json
import pathlib
import struct
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import trio

from protocol.codes import RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from rmq_client.producer import Message, SendStatus, open_producer
from tests.reliability.conftest import Daemon, read_records

SEND_FIELDS = {"a": "g", "b": "Hostile", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0"}
SEND_FIELDS["h"] = "0"


def raw_json(header: object, body: bytes = b"", serialize_type: int = 0) -> bytes:
    data = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(data) + len(body), serialize_type << 24 | len(data)) + (
        data + body
    )


def send_v2(
    serialize_type: SerializeType = SerializeType.JSON, body: bytes = b"x", **fields: str
) -> bytes:
    command = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {**SEND_FIELDS, **fields},
        body=body,
        opaque=7,
        serialize_type=serialize_type,
    )
    return encode_frame(command)


def ext(value: object) -> bytes:
    return raw_json({"code": 310, "opaque": 7, "extFields": {**SEND_FIELDS, "e": value}}, b"x")


#: frame-level faults: the connection is closed
CLOSED: dict[str, bytes] = {
    "length_2gib": struct.pack(">i", 0x7FFFFFFF) + b"\0" * 64,
    "length_negative": struct.pack(">i", -1) + b"\0" * 8,
    "length_below_header_word": struct.pack(">i", 2) + b"\0" * 8,
    "header_length_beyond_frame": struct.pack(">ii", 12, 0xFFFFFF) + b"{}" + b"\0" * 6,
    "serialize_type_unknown": struct.pack(">ii", 6, 7 << 24 | 2) + b"{}",
    "json_array": raw_json([1, 2]),
    "json_string": raw_json("send"),
    "json_number": raw_json(310),
    "json_null": raw_json(None),
    "json_not_utf8": struct.pack(">ii", 6, 2) + b"\xff\xfe",
    "opaque_beyond_int32": raw_json({"code": 310, "opaque": 1 << 40}),
    "frame_over_16mib": send_v2(body=b"v" * (17 << 20)),
    "binary_header_bad_map_length": struct.pack(">ii", 4 + 25, 1 << 24 | 25)
    + struct.pack(">hBhiii", 310, 0, 0, 1, 0, 0)
    + struct.pack(">i", 1 << 20)
    + b"\0" * 4,
}
#: request-level faults: answered with this code, the connection stays open
ANSWERED: dict[str, tuple[bytes, int]] = {
    "topic_illegal_characters": (send_v2(b="a/b c"), ResponseCode.SYSTEM_ERROR),
    "topic_too_long": (send_v2(b="T" * 200), ResponseCode.SYSTEM_ERROR),
    "properties_10mb": (send_v2(i="k\x01" + "v" * 10_000_000), ResponseCode.MESSAGE_ILLEGAL),
    "queue_id_a_bool": (ext(True), ResponseCode.SYSTEM_ERROR),
    "queue_id_a_float": (ext(1.5), ResponseCode.SYSTEM_ERROR),
    "queue_id_beyond_int32": (ext(1 << 40), ResponseCode.SYSTEM_ERROR),
    "queue_id_out_of_range": (send_v2(e="4096"), ResponseCode.SYSTEM_ERROR),
    "required_field_missing": (raw_json({"code": 310, "opaque": 7}), ResponseCode.SYSTEM_ERROR),
    "batch_body_garbage": (send_v2(m="true"), ResponseCode.MESSAGE_ILLEGAL),
    "binary_header_bad_topic": (
        send_v2(SerializeType.ROCKETMQ, b="bad topic"),
        ResponseCode.SYSTEM_ERROR,
    ),
    "unknown_request_code": (raw_json({"code": 9999, "opaque": 7}), 3),
    # a header field of the wrong type, with a readable opaque: that request is refused
    "code_a_string": (raw_json({"code": "310", "opaque": 1}), ResponseCode.SYSTEM_ERROR),
    "ext_fields_a_list": (
        raw_json({"code": 310, "opaque": 1, "extFields": ["a", "b"]}),
        ResponseCode.SYSTEM_ERROR,
    ),
    "ext_value_an_object": (ext({"x": 1}), ResponseCode.SYSTEM_ERROR),
    "ext_value_a_list": (ext([0]), ResponseCode.SYSTEM_ERROR),
    "language_huge": (
        raw_json({"code": 310, "opaque": 1, "language": 10**30}),
        ResponseCode.SYSTEM_ERROR,
    ),
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    running = Daemon(tmp_path_factory.mktemp("frames") / "store", "--flush-disk-type", "SYNC_FLUSH")
    yield running
    assert running.stop() == 0


async def exchange(port: int, payload: bytes) -> tuple[str, RemotingCommand | None, bool]:
    """(our address as the broker logs it, the first answer or None, still open after it)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    local = stream.socket.getsockname()
    remote = f"{local[0]}:{local[1]}"
    decoder = FrameDecoder(max_frame_length=64 << 20)
    async with stream:
        try:
            await stream.send_all(payload)
        except trio.BrokenResourceError:
            return remote, None, False
        with trio.fail_after(20):
            while True:
                try:
                    data = await stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    return remote, None, False
                if not data:
                    return remote, None, False
                commands = decoder.feed(data)
                if commands:
                    break
        # still open: a second, valid request on the same connection is answered
        await stream.send_all(send_v2())
        with trio.fail_after(20):
            while not (more := decoder.feed(await stream.receive_some(1 << 16))):
                pass
        return remote, commands[0], more[0].code == ResponseCode.SUCCESS


def events_for(daemon: Daemon, remote: str, wait_s: float = 2.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + wait_s
    while True:
        daemon.drain()
        found = [e for e in daemon.events if e.get("remote") == remote]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


async def check(daemon: Daemon, payload: bytes) -> tuple[str, RemotingCommand | None, bool]:
    async with open_producer("127.0.0.1", daemon.port, timeout_s=20) as good:
        outcome = await exchange(daemon.port, payload)
        result = await good.send(Message("StillServed", b"ok"))
        assert result.status is SendStatus.SEND_OK
    return outcome


@pytest.mark.parametrize("name", sorted(CLOSED))
def test_frame_level_faults_close_only_their_connection_with_one_event(
    daemon: Daemon, name: str
) -> None:
    remote, answer, still_open = trio.run(check, daemon, CLOSED[name])
    assert answer is None and not still_open, f"{name}: the connection should have been closed"
    events = events_for(daemon, remote)
    assert [e["event"] for e in events] == ["protocol_error"], events
    assert events[0].get("error"), events
    assert daemon.process.poll() is None


@pytest.mark.parametrize("name", sorted(ANSWERED))
def test_request_level_faults_are_answered_and_keep_the_connection(
    daemon: Daemon, name: str
) -> None:
    payload, code = ANSWERED[name]
    _, answer, still_open = trio.run(check, daemon, payload)
    assert answer is not None and answer.code == code, (name, answer)
    assert answer.remark, f"{name}: a refusal needs a remark"
    assert still_open, f"{name}: the connection should stay usable"


def test_each_refused_request_is_logged_once(daemon: Daemon) -> None:
    silent = []
    for name in sorted(ANSWERED):
        remote, answer, _ = trio.run(check, daemon, ANSWERED[name][0])
        assert answer is not None
        events = events_for(daemon, remote, wait_s=0.5)
        if len(events) != 1:
            silent.append((name, [e["event"] for e in events]))
    assert silent == [], f"refusals without exactly one log event: {silent}"


def test_store_holds_only_the_well_formed_messages(tmp_path: pathlib.Path) -> None:
    """Its own broker and its own traffic: every hostile payload once, each beside a good send,
    and the follow-up send on every connection left open. Exactly those good messages are
    stored, whole and CRC-checked; no part of a hostile payload is."""
    daemon = Daemon(tmp_path / "store", "--flush-disk-type", "SYNC_FLUSH")
    try:
        outcomes = [trio.run(check, daemon, payload) for payload in CLOSED.values()]
        outcomes += [trio.run(check, daemon, payload) for payload, _ in ANSWERED.values()]
    finally:
        assert daemon.stop() == 0
    still_open = sum(1 for _, _, kept in outcomes if kept)
    assert still_open == len(ANSWERED)
    records = read_records(tmp_path / "store")
    assert all(r.crc_ok is not False for r in records)
    stored = Counter((r.topic, r.body) for r in records)
    assert stored == {
        ("StillServed", b"ok"): len(CLOSED) + len(ANSWERED),
        ("Hostile", b"x"): still_open,
    }, stored
