"""Offset message ids."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.msgid import InvalidMessageIdError, decode_offset_msg_id, encode_offset_msg_id

ports = st.integers(0, 65535)
offsets = st.integers(0, (1 << 63) - 1)


def test_spec_example() -> None:
    assert encode_offset_msg_id("127.0.0.1", 10911, 0) == "7F00000100002A9F0000000000000000"
    assert decode_offset_msg_id("7F00000100002A9F0000000000000000") == ("127.0.0.1", 10911, 0)


@given(st.ip_addresses(v=4), ports, offsets)
@settings(max_examples=100)
def test_ipv4_round_trip(ip: ipaddress.IPv4Address, port: int, offset: int) -> None:
    msg_id = encode_offset_msg_id(str(ip), port, offset)
    assert len(msg_id) == 32
    assert msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == (str(ip), port, offset)


def not_mapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None


@given(st.ip_addresses(v=6).filter(not_mapped), ports, offsets)
@settings(max_examples=100)
def test_ipv6_round_trip(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, offset: int
) -> None:
    msg_id = encode_offset_msg_id(str(ip), port, offset)
    assert len(msg_id) == 56
    assert decode_offset_msg_id(msg_id) == (str(ip), port, offset)


def test_ipv4_mapped_ipv6_counts_as_ipv4() -> None:
    assert encode_offset_msg_id("::ffff:10.0.0.1", 10911, 255) == encode_offset_msg_id(
        "10.0.0.1", 10911, 255
    )
    assert decode_offset_msg_id(encode_offset_msg_id("::ffff:10.0.0.1", 1, 2))[0] == "10.0.0.1"


def test_ipv6_loopback() -> None:
    msg_id = encode_offset_msg_id("::1", 10911, 0x1C8)
    assert msg_id == "0" * 31 + "1" + "00002A9F" + "00000000000001C8"
    assert decode_offset_msg_id(msg_id) == ("::1", 10911, 0x1C8)


@pytest.mark.parametrize(
    ("msg_id", "message"),
    [
        ("", "0 characters"),
        ("7F0000010000", "12 characters"),
        ("7F00000100002A9F000000000000000G", "not hexadecimal"),
        ("7F00000100002A9F00000000000000é0", "not hexadecimal"),
        ("7F00000100002A9F0000000000000000,7F00000100002A9F0000000000000000", "65 characters"),
    ],
)
def test_bad_ids_raise(msg_id: str, message: str) -> None:
    with pytest.raises(InvalidMessageIdError, match=message):
        decode_offset_msg_id(msg_id)
