"""Body decompression by sysFlag: zlib, LZ4 (frame format) and ZSTD, each fed bodies that its
own library compressed."""

from __future__ import annotations

import importlib
import types
import zlib

import lz4.frame
import pytest
import zstandard
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


def lz4_frame(data: bytes) -> bytes:
    return bytes(lz4.frame.compress(data))


def zstd_frame(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def zstd_stream(data: bytes) -> bytes:
    """A frame written by a streaming compressor: no content size in its header, as a
    client's output stream writes it."""
    out = zstandard.ZstdCompressor().compressobj()
    return out.compress(data) + out.flush()


COMPRESSORS = {
    "lz4": (COMPRESSION_LZ4, lz4_frame),
    "zstd": (COMPRESSION_ZSTD, zstd_frame),
    "zstd_stream": (COMPRESSION_ZSTD, zstd_stream),
}


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
@given(body=st.binary(max_size=20_000))
@settings(max_examples=40)
def test_lz4_and_zstd_round_trip(name: str, body: bytes) -> None:
    kind, compress = COMPRESSORS[name]
    packed = compress(body)
    if len(body) > 64:
        assert packed != body
    assert decompress_body(packed, 1 | kind) == body


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_lz4_and_zstd_large_compressible_body(name: str) -> None:
    kind, compress = COMPRESSORS[name]
    body = b"".join(b"line %06d of a log message\n" % i for i in range(20_000))
    packed = compress(body)
    assert len(packed) < len(body) // 4
    assert decompress_body(packed, 1 | 4 | kind) == body  # other sysFlag bits do not matter


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_lz4_and_zstd_decompressed_size_is_bounded(name: str) -> None:
    kind, compress = COMPRESSORS[name]
    bomb = compress(b"\x00" * 100_000)
    # A streamed ZSTD frame names no size: the decoder stops at the bound, mid-frame.
    with pytest.raises(BodyDecompressionError, match=r"beyond 1000 bytes|full frame") as info:
        decompress_body(bomb, 1 | kind, max_length=1000)
    assert info.value.response_code == ResponseCode.MESSAGE_ILLEGAL
    assert len(decompress_body(bomb, 1 | kind, max_length=100_000)) == 100_000


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_lz4_and_zstd_corrupt_or_truncated(name: str) -> None:
    kind, compress = COMPRESSORS[name]
    packed = compress(bytes(range(256)) * 40)
    for bad in (b"definitely not a frame", packed[: len(packed) // 2]):
        with pytest.raises(BodyDecompressionError, match="does not decode"):
            decompress_body(bad, 1 | kind)


def test_the_wrong_algorithm_does_not_decode() -> None:
    body = b"abc" * 1000
    with pytest.raises(BodyDecompressionError):
        decompress_body(lz4_frame(body), 1 | COMPRESSION_ZSTD)
    with pytest.raises(BodyDecompressionError):
        decompress_body(zstd_frame(body), 1 | COMPRESSION_LZ4)
    with pytest.raises(BodyDecompressionError):
        decompress_body(zstd_frame(body), 1)  # zlib


@pytest.mark.parametrize(
    ("kind", "module"), [(COMPRESSION_LZ4, "lz4.frame"), (COMPRESSION_ZSTD, "zstandard")]
)
def test_lz4_and_zstd_without_their_library(
    monkeypatch: pytest.MonkeyPatch, kind: int, module: str
) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> types.ModuleType:
        if name == module:
            raise ImportError(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(BodyDecompressionError, match=f"the {module} package is not installed"):
        decompress_body(b"x", 1 | kind)
