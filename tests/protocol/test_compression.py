"""Body decompression by sysFlag."""

from __future__ import annotations

import importlib.util
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codes import ResponseCode
from protocol.compression import (
    COMPRESSION_LZ4,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    compress_body,
    decompress_body,
)
from protocol.errors import BodyDecompressionError


@given(st.binary(max_size=5000), st.sampled_from([1, 1 | COMPRESSION_ZLIB, 1 | 4 | 0x80]))
@settings(max_examples=60)
def test_zlib_round_trip(body: bytes, sys_flag: int) -> None:
    assert decompress_body(compress_body(body), sys_flag) == body


def test_uncompressed_body_is_returned_as_is() -> None:
    data = b"not compressed"
    assert decompress_body(data, 0) is data
    assert decompress_body(data, COMPRESSION_ZLIB) is data  # bit 0 clear


def test_corrupt_zlib() -> None:
    with pytest.raises(BodyDecompressionError, match="does not inflate") as info:
        decompress_body(b"\x00\x01garbage", 1)
    assert info.value.response_code == ResponseCode.MESSAGE_ILLEGAL


def test_truncated_zlib() -> None:
    with pytest.raises(BodyDecompressionError, match="truncated"):
        decompress_body(zlib.compress(b"a" * 1000)[:-4], 1)


def test_decompressed_size_is_bounded() -> None:
    bomb = zlib.compress(b"\x00" * 100_000)
    with pytest.raises(BodyDecompressionError, match="beyond 1000 bytes"):
        decompress_body(bomb, 1, max_length=1000)


def test_unknown_compression_type() -> None:
    with pytest.raises(BodyDecompressionError, match="unknown compression type 0x400"):
        decompress_body(b"x", 1 | 0x400)


@pytest.mark.parametrize(
    ("kind", "module"), [(COMPRESSION_LZ4, "lz4"), (COMPRESSION_ZSTD, "zstandard")]
)
def test_lz4_and_zstd_need_their_library(kind: int, module: str) -> None:
    if importlib.util.find_spec(module) is None:
        with pytest.raises(BodyDecompressionError, match="not installed"):
            decompress_body(b"x", 1 | kind)
    else:
        with pytest.raises(BodyDecompressionError, match="does not decode"):
            decompress_body(b"definitely not a frame", 1 | kind)
