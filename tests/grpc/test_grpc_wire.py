"""gRPC's framing and headers (protocol/grpc_wire.py), without a socket."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.grpc_wire import (
    INTERNAL,
    RESOURCE_EXHAUSTED,
    UNIMPLEMENTED,
    MessageDecoder,
    WireError,
    check_encoding,
    decode_binary_header,
    decode_grpc_message,
    encode_grpc_message,
    encode_message,
    metadata,
    parse_timeout,
)


@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(1, 50))
def test_messages_survive_any_split(payloads: list[bytes], chunk: int) -> None:
    wire = b"".join(encode_message(p) for p in payloads)
    decoder = MessageDecoder(max_size=300)
    out: list[bytes] = []
    for i in range(0, len(wire), chunk):
        out.extend(decoder.feed(wire[i : i + chunk]))
    assert out == payloads
    assert decoder.pending == 0


def test_a_length_over_the_limit_is_refused_before_its_payload() -> None:
    decoder = MessageDecoder(max_size=10)
    assert decoder.feed(encode_message(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(WireError) as info:
        decoder.feed(encode_message(b"y" * 11)[:5])  # the prefix alone
    assert info.value.status == RESOURCE_EXHAUSTED


def test_compressed_flag_needs_gzip_negotiated() -> None:
    packed = b"\x01" + len(gzip.compress(b"abc")).to_bytes(4, "big") + gzip.compress(b"abc")
    with pytest.raises(WireError) as info:
        MessageDecoder(100).feed(packed)
    assert info.value.status == INTERNAL
    assert MessageDecoder(100, "gzip").feed(packed) == [b"abc"]
    with pytest.raises(WireError) as bad_flag:
        MessageDecoder(100).feed(b"\x02\x00\x00\x00\x00")
    assert bad_flag.value.status == INTERNAL


def test_gzip_is_bounded_and_checked() -> None:
    bomb = gzip.compress(b"\0" * 10_000)
    packed = b"\x01" + len(bomb).to_bytes(4, "big") + bomb
    with pytest.raises(WireError) as info:
        MessageDecoder(1000, "gzip").feed(packed)
    assert info.value.status == RESOURCE_EXHAUSTED
    cut = gzip.compress(b"abcdef" * 100)[:-10]
    with pytest.raises(WireError) as truncated:
        MessageDecoder(1000, "gzip").feed(b"\x01" + len(cut).to_bytes(4, "big") + cut)
    assert truncated.value.status == INTERNAL
    garbage = b"\x01\x00\x00\x00\x04abcd"
    with pytest.raises(WireError):
        MessageDecoder(1000, "gzip").feed(garbage)


def test_encodings() -> None:
    check_encoding(None)
    check_encoding("identity")
    check_encoding("gzip")
    with pytest.raises(WireError) as info:
        check_encoding("snappy")
    assert info.value.status == UNIMPLEMENTED


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1S", 1.0), ("250m", 0.25), ("99999999n", 0.099999999), ("2H", 7200.0), ("3M", 180.0)],
)
def test_timeouts(text: str, seconds: float) -> None:
    assert parse_timeout(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "S", "123456789S", "10", "10x", "-1S", "1.5S", "١S"])
def test_bad_timeouts(text: str) -> None:
    with pytest.raises(ValueError):
        parse_timeout(text)


@given(st.text())
def test_grpc_message_round_trip_in_printable_ascii(text: str) -> None:
    encoded = encode_grpc_message(text)
    assert all(0x20 <= ord(c) <= 0x7E for c in encoded)
    assert decode_grpc_message(encoded) == text


def test_grpc_message_examples() -> None:
    assert encode_grpc_message("100% thé") == "100%25 th%C3%A9"
    assert decode_grpc_message("bad %zz escape%") == "bad %zz escape%"


def test_metadata() -> None:
    headers = [
        (":path", "/x"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", "1S"),
        ("X-Mq-Client-Id", "c1"),
        ("x-trace-bin", "AP8"),  # unpadded
        ("x-other-bin", "AP8="),
        ("x-multi", "a"),
        ("x-multi", "b"),
    ]
    assert metadata(headers) == {
        "x-mq-client-id": "c1",
        "x-trace-bin": "\x00\xff",
        "x-other-bin": "\x00\xff",
        "x-multi": "a,b",
    }
    assert decode_binary_header("") == b""
    with pytest.raises(ValueError):
        metadata([("x-bad-bin", "not base64!")])
