"""Frames: round trips, any chunking, bounded buffering, and each framing error."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codes import RequestCode, SerializeType
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from protocol.frame import FrameDecoder, FramesBeforeError, encode_frame
from tests.protocol.strategies import commands

SPEC_EXAMPLE = bytes.fromhex(
    "00000025 0100001e 0136 00 0197 00000001 00000000 00000000 00000009 0001 62 00000002 5431"
    " 616263"
)


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    length = 4 + len(header) + len(body)
    return struct.pack(">ii", length, serialize_type << 24 | len(header)) + header + body


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[RemotingCommand]:
    return [cmd for chunk in chunks for cmd in decoder.feed(chunk)]


@given(commands())
@settings(max_examples=150)
def test_frame_round_trip(cmd: RemotingCommand) -> None:
    assert FrameDecoder().feed(encode_frame(cmd)) == [cmd]


@given(st.lists(commands(), min_size=1, max_size=5), st.data())
@settings(max_examples=80)
def test_frames_survive_any_chunking(cmds: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    decoder = FrameDecoder()
    assert feed_all(decoder, chunks) == cmds
    assert decoder.buffered == 0


@given(commands())
@settings(max_examples=30)
def test_frame_fed_one_byte_at_a_time(cmd: RemotingCommand) -> None:
    data = encode_frame(cmd)
    decoder = FrameDecoder()
    for i in range(len(data) - 1):
        assert decoder.feed(data[i : i + 1]) == []
        assert decoder.buffered == i + 1
    assert decoder.feed(data[-1:]) == [cmd]
    assert decoder.buffered == 0


@given(commands(), st.binary(min_size=1, max_size=7))
@settings(max_examples=50)
def test_trailing_partial_prefix_is_kept(cmd: RemotingCommand, tail: bytes) -> None:
    # a partial next frame whose length prefix (if complete) is valid
    tail = (b"\x00\x00\x00\x08" + tail)[: len(tail)]
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(cmd) + tail) == [cmd]
    assert decoder.buffered == len(tail)


def test_trailing_bytes_complete_the_next_frame() -> None:
    first = encode_frame(RemotingCommand.request(RequestCode.HEART_BEAT, opaque=1))
    second = encode_frame(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"a": "b"}, b"x"))
    decoder = FrameDecoder()
    out = decoder.feed(first + second[:5])
    assert [c.opaque for c in out] == [1]
    assert decoder.buffered == 5
    (cmd,) = decoder.feed(second[5:])
    assert (cmd.code, cmd.ext_fields, cmd.body) == (RequestCode.SEND_MESSAGE, {"a": "b"}, b"x")


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    with contextlib.suppress(RemotingProtocolError):
        FrameDecoder(max_frame_length=1 << 16).feed(data)


@given(st.binary(max_size=120), st.sampled_from([0, 1]))
@settings(max_examples=300)
def test_arbitrary_headers_decode_or_raise_protocol_error(header: bytes, kind: int) -> None:
    with contextlib.suppress(RemotingProtocolError):
        FrameDecoder().feed(frame(header, b"", kind))


def test_spec_binary_example_decodes() -> None:
    (cmd,) = FrameDecoder().feed(SPEC_EXAMPLE)
    assert cmd == RemotingCommand(
        code=310,
        language=0,
        version=407,
        opaque=1,
        flag=0,
        remark=None,
        ext_fields={"b": "T1"},
        body=b"abc",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode_frame(cmd) == SPEC_EXAMPLE


def test_empty_body_decodes_as_none() -> None:
    (cmd,) = FrameDecoder().feed(frame(b'{"code":34}'))
    assert cmd.body is None
    assert cmd.code == 34


def test_negative_length_is_rejected_with_four_bytes() -> None:
    with pytest.raises(RemotingProtocolError, match="negative frame length -1"):
        FrameDecoder().feed(b"\xff\xff\xff\xff")


def test_oversized_length_is_rejected_before_the_frame_arrives() -> None:
    decoder = FrameDecoder(max_frame_length=1024)
    # length + 4 > max, as upstream compares: 1021 + 4 > 1024
    with pytest.raises(RemotingProtocolError, match="exceeds the maximum 1024"):
        decoder.feed(struct.pack(">i", 1021))
    assert decoder.buffered == 0


def test_length_at_the_maximum_is_accepted() -> None:
    body = b"z" * (1024 - 8 - 2)
    (cmd,) = FrameDecoder(max_frame_length=1024).feed(frame(b"{}", body))
    assert cmd.body == body


def test_length_too_short_for_header_word() -> None:
    with pytest.raises(RemotingProtocolError, match="too short"):
        FrameDecoder().feed(struct.pack(">ii", 3, 0))


def test_header_length_beyond_the_frame() -> None:
    with pytest.raises(RemotingProtocolError, match="header length 9 exceeds frame length 12"):
        FrameDecoder().feed(struct.pack(">ii", 12, 9) + b"{}" * 4)


def test_unknown_serialize_type() -> None:
    with pytest.raises(RemotingProtocolError, match="unknown serialize type 2"):
        FrameDecoder().feed(frame(b"{}", b"", serialize_type=2))


def test_non_object_json_header() -> None:
    with pytest.raises(RemotingProtocolError, match="not an object"):
        FrameDecoder().feed(frame(b"[1, 2]"))


def test_undecodable_json_header() -> None:
    with pytest.raises(RemotingProtocolError, match="undecodable JSON header"):
        FrameDecoder().feed(frame(b'{"code":'))


def test_decoder_stays_failed_after_an_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemotingProtocolError):
        decoder.feed(b"\x80\x00\x00\x00")
    with pytest.raises(RemotingProtocolError, match="negative"):
        decoder.feed(frame(b"{}"))


@pytest.mark.parametrize(
    "bad",
    [b"\xff\xff\xff\xff", struct.pack(">ii", 12, 9) + b"{}" * 4, frame(b"[1]")],
    ids=["negative_length", "header_beyond_frame", "json_not_an_object"],
)
def test_frames_before_a_bad_one_are_carried_by_the_error(bad: bytes) -> None:
    good = [RemotingCommand.request(RequestCode.SEND_MESSAGE, {"a": "b"}, opaque=n) for n in (1, 2)]
    decoder = FrameDecoder()
    with pytest.raises(FramesBeforeError) as info:
        decoder.feed(b"".join(encode_frame(c) for c in good) + bad)
    assert list(info.value.decoded) == good
    with pytest.raises(RemotingProtocolError) as again:
        decoder.feed(encode_frame(good[0]))
    assert not isinstance(again.value, FramesBeforeError)  # handed out once only
    assert str(again.value) == str(info.value)


def test_frames_of_earlier_feeds_are_not_carried_again() -> None:
    decoder = FrameDecoder()
    first = RemotingCommand.request(RequestCode.HEART_BEAT, opaque=1)
    assert decoder.feed(encode_frame(first)) == [first]
    with pytest.raises(RemotingProtocolError) as info:
        decoder.feed(b"\xff\xff\xff\xff")
    assert not isinstance(info.value, FramesBeforeError)


def test_buffering_is_bounded_by_one_frame() -> None:
    decoder = FrameDecoder(max_frame_length=4096)
    partial = frame(b"{}", b"y" * 4000)[:-1]
    assert decoder.feed(partial) == []
    assert decoder.buffered == len(partial) <= 4096
    with pytest.raises(RemotingProtocolError):
        FrameDecoder(max_frame_length=4096).feed(frame(b"{}", b"y" * 5000)[:8])


def test_many_frames_in_one_chunk() -> None:
    cmds = [RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque=n) for n in range(50)]
    decoder = FrameDecoder()
    assert decoder.feed(b"".join(encode_frame(c) for c in cmds)) == cmds


def test_header_over_24_bits_cannot_be_encoded() -> None:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"k": "v" * (1 << 24)})
    with pytest.raises(ValueError, match="24 bits"):
        encode_frame(cmd)
