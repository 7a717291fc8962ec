"""The HA codec: round trips under any chunking, the bounds, arbitrary bytes."""

from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.ha import (
    REPORT,
    TRANSFER_HEADER,
    HAProtocolError,
    ReportDecoder,
    TransferDecoder,
    TransferFrame,
    encode_report,
    encode_transfer,
)

offsets = st.integers(0, (1 << 63) - 1)
frames = st.lists(st.tuples(offsets, st.binary(max_size=300)), max_size=6)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(frames, st.lists(st.integers(0, 4000), max_size=8))
@settings(max_examples=150)
def test_transfer_round_trip_any_chunking(sent: list[tuple[int, bytes]], cuts: list[int]) -> None:
    wire = b"".join(encode_transfer(offset, data) for offset, data in sent)
    decoder = TransferDecoder(max_body=300)
    got = [frame for chunk in chunked(wire, cuts) for frame in decoder.feed(chunk)]
    assert got == [TransferFrame(offset, data) for offset, data in sent]
    assert decoder.buffered == 0


def test_transfer_byte_by_byte_and_trailing_bytes() -> None:
    wire = encode_transfer(4096, b"abc") + encode_transfer(4099)  # data then a heartbeat
    decoder = TransferDecoder()
    got = [frame for i in range(len(wire)) for frame in decoder.feed(wire[i : i + 1])]
    assert got == [TransferFrame(4096, b"abc"), TransferFrame(4099, b"")]
    assert decoder.feed(wire[:5]) == []  # a partial header stays buffered
    assert decoder.buffered == 5


def test_transfer_layout_is_4_9s() -> None:
    assert encode_transfer(0x0102, b"xy") == bytes.fromhex("0000000000000102 00000002 7879")


@given(st.lists(offsets, max_size=20), st.lists(st.integers(0, 200), max_size=6))
def test_report_round_trip_any_chunking(sent: list[int], cuts: list[int]) -> None:
    wire = b"".join(encode_report(offset) for offset in sent)
    decoder = ReportDecoder()
    assert [o for chunk in chunked(wire, cuts) for o in decoder.feed(chunk)] == sent


def test_size_over_bound_refused_before_its_data() -> None:
    decoder = TransferDecoder(max_body=1024)
    with pytest.raises(HAProtocolError, match="size 1025"):
        decoder.feed(TRANSFER_HEADER.pack(0, 1025))


@pytest.mark.parametrize(
    ("header", "needle"),
    [(TRANSFER_HEADER.pack(-1, 0), "negative offset"), (TRANSFER_HEADER.pack(0, -5), "size -5")],
)
def test_bad_transfer_header(header: bytes, needle: str) -> None:
    with pytest.raises(HAProtocolError, match=needle):
        TransferDecoder().feed(header)


def test_negative_report_refused() -> None:
    with pytest.raises(HAProtocolError, match="negative"):
        ReportDecoder().feed(REPORT.pack(-8))


def test_encoders_refuse_negative_offsets() -> None:
    with pytest.raises(ValueError, match="negative"):
        encode_transfer(-1)
    with pytest.raises(ValueError, match="negative"):
        encode_report(-1)


@given(st.binary(max_size=2000))
def test_arbitrary_bytes_decode_or_raise_our_error(data: bytes) -> None:
    with contextlib.suppress(HAProtocolError):
        TransferDecoder(max_body=512).feed(data)
    with contextlib.suppress(HAProtocolError):
        ReportDecoder().feed(data)
