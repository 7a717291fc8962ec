"""ROCKETMQ binary headers: the spec's example, round trips, and every length check."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings

from protocol.binary_header import decode_binary_header, encode_binary_header
from protocol.codes import SerializeType
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from tests.protocol.strategies import commands

# header of the spec's SEND_MESSAGE_V2 example (section 4)
SPEC_HEADER = bytes.fromhex(
    "0136 00 0197 00000001 00000000 00000000 00000009 0001 62 00000002 5431"
)


def fixed(remark_len: int = 0, code: int = 310) -> bytes:
    return struct.pack(">hBhiii", code, 0, 407, 1, 0, remark_len)


@given(commands(SerializeType.ROCKETMQ))
@settings(max_examples=150)
def test_binary_header_round_trip(cmd: RemotingCommand) -> None:
    assert decode_binary_header(encode_binary_header(cmd), cmd.body) == cmd


def test_spec_example() -> None:
    cmd = decode_binary_header(SPEC_HEADER, b"abc")
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (310, 0, 407, 1, 0)
    assert cmd.remark is None
    assert cmd.ext_fields == {"b": "T1"}
    assert cmd.serialize_type is SerializeType.ROCKETMQ
    assert encode_binary_header(cmd) == SPEC_HEADER


def test_remark_and_unicode_fields() -> None:
    cmd = RemotingCommand(
        1, 3, 5, -7, 1, "système", {"clé": "värde", "": ""}, None, SerializeType.ROCKETMQ
    )
    data = encode_binary_header(cmd)
    assert struct.unpack_from(">i", data, 13)[0] == len("système".encode())
    assert decode_binary_header(data, None) == cmd


def test_short_header() -> None:
    with pytest.raises(RemotingProtocolError, match="shorter than 21"):
        decode_binary_header(fixed()[:-1], None)


def test_remark_length_larger_than_header() -> None:
    with pytest.raises(RemotingProtocolError, match="remark length 100"):
        decode_binary_header(fixed(100) + b"\x00\x00\x00\x00", None)


def test_negative_remark_length() -> None:
    with pytest.raises(RemotingProtocolError, match="remark length -1"):
        decode_binary_header(fixed(-1) + b"\x00\x00\x00\x00", None)


def test_map_length_larger_than_header() -> None:
    with pytest.raises(RemotingProtocolError, match="extFields length 50"):
        decode_binary_header(fixed() + struct.pack(">i", 50), None)


def test_map_entry_cut_short() -> None:
    entry = struct.pack(">h", 1) + b"k" + struct.pack(">i", 5) + b"v"
    with pytest.raises(RemotingProtocolError, match="extFields value length 5"):
        decode_binary_header(fixed() + struct.pack(">i", len(entry)) + entry, None)


def test_map_entry_with_a_lone_byte() -> None:
    with pytest.raises(RemotingProtocolError, match="entry cut"):
        decode_binary_header(fixed() + struct.pack(">i", 1) + b"\x00", None)


def test_trailing_bytes_after_map() -> None:
    with pytest.raises(RemotingProtocolError, match="1 trailing bytes"):
        decode_binary_header(fixed() + struct.pack(">i", 0) + b"\x00", None)


def test_invalid_utf8_remark() -> None:
    with pytest.raises(RemotingProtocolError, match="not UTF-8"):
        decode_binary_header(fixed(1) + b"\xff" + struct.pack(">i", 0), None)
