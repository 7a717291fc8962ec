"""Client-side batch bodies: round trips and a precise error for each malformation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import BatchBodyError, BatchEntry, decode_batch_body, encode_batch_body
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError

entries = st.builds(
    BatchEntry,
    flag=st.integers(-(1 << 31), (1 << 31) - 1),
    body=st.binary(max_size=100),
    properties=st.text(max_size=40),
)


@given(st.lists(entries, min_size=1, max_size=6))
@settings(max_examples=150)
def test_round_trip(batch: list[BatchEntry]) -> None:
    assert decode_batch_body(encode_batch_body(batch)) == batch


def test_layout_of_one_entry() -> None:
    body = encode_batch_body([BatchEntry(7, b"abc", "K\x01v")])
    assert body == struct.pack(">iiiii", 22 + 3 + 3, 0, 0, 7, 3) + b"abc" + b"\x00\x03K\x01v"


def entry(total: int | None = None, body_len: int = 3, props_len: int = 2) -> bytes:
    size = 22 + 3 + 2 if total is None else total
    return (
        struct.pack(">iiiii", size, 0, 0, 0, body_len)
        + b"abc"
        + struct.pack(">h", props_len)
        + b"xy"
    )


def decode_error(data: bytes) -> BatchBodyError:
    with pytest.raises(BatchBodyError) as info:
        decode_batch_body(data)
    assert isinstance(info.value, HeaderFieldError)
    assert info.value.response_code == ResponseCode.MESSAGE_ILLEGAL
    assert info.value.field == "body"
    return info.value


def test_valid_helper_entry_decodes() -> None:
    assert decode_batch_body(entry() + entry()) == [BatchEntry(0, b"abc", "xy")] * 2


def test_empty_body() -> None:
    assert "empty" in str(decode_error(b""))


def test_cut_short_entry() -> None:
    assert str(decode_error(entry() + b"\x00" * 5)) == (
        "batch entry at byte 27 is cut short: 5 bytes left"
    )


def test_body_length_beyond_the_end() -> None:
    assert "at byte 0 has bad body length 1000" in str(decode_error(entry(body_len=1000)))


def test_negative_body_length() -> None:
    assert "bad body length -1" in str(decode_error(entry(body_len=-1)))


def test_properties_length_beyond_the_end() -> None:
    assert "bad properties length 9" in str(decode_error(entry(props_len=9)))


def test_negative_properties_length() -> None:
    assert "bad properties length -2" in str(decode_error(entry(props_len=-2)))


def test_total_size_mismatch() -> None:
    message = str(decode_error(entry() + entry(total=99)))
    assert message == "batch entry at byte 27 has total size 99, its fields make 27"


def test_non_utf8_properties() -> None:
    data = struct.pack(">iiiii", 24, 0, 0, 0, 0) + struct.pack(">h", 2) + b"\xff\xfe"
    assert "non-UTF-8 properties" in str(decode_error(data))
