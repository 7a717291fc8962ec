"""Message body compression as flagged in sysFlag (`MessageSysFlag`, `CompressionType`).

sysFlag bit 0 (COMPRESSED_FLAG) marks a compressed body. Bits 8-10 name the algorithm: 0 (what
4.x clients send: zlib), LZ4 0x100, ZSTD 0x200, ZLIB 0x300. The Java and C++ clients compress
bodies of 4 KiB and more with zlib. LZ4 and ZSTD need the optional `lz4` / `zstandard` packages.
"""

from __future__ import annotations

import importlib
import zlib
from typing import Final

from .errors import BodyDecompressionError

COMPRESSED_FLAG: Final = 0x1
COMPRESSION_TYPE_MASK: Final = 0x7 << 8
COMPRESSION_LZ4: Final = 0x1 << 8
COMPRESSION_ZSTD: Final = 0x2 << 8
COMPRESSION_ZLIB: Final = 0x3 << 8
#: the default bound on a decompressed body, so a small body cannot expand without limit
DEFAULT_MAX_DECOMPRESSED: Final = 64 * 1024 * 1024


def decompress_body(
    body: bytes, sys_flag: int, max_length: int = DEFAULT_MAX_DECOMPRESSED
) -> bytes:
    """`body` as the producer wrote it, decompressed when sysFlag says it is compressed.

    Raises `BodyDecompressionError` for corrupt data, output over `max_length` bytes, or an
    algorithm whose library is not installed.
    """
    if not sys_flag & COMPRESSED_FLAG:
        return body
    kind = sys_flag & COMPRESSION_TYPE_MASK
    if kind in (0, COMPRESSION_ZLIB):
        return _inflate(body, max_length)
    if kind == COMPRESSION_LZ4:
        return _with_library("lz4.frame", "LZ4", body, max_length)
    if kind == COMPRESSION_ZSTD:
        return _with_library("zstandard", "ZSTD", body, max_length)
    raise BodyDecompressionError(f"unknown compression type 0x{kind:x} in sysFlag {sys_flag}")


def compress_body(body: bytes, level: int = 5) -> bytes:
    """zlib, as the 4.x clients do (level 5 is the Java client's default)."""
    return zlib.compress(body, level)


def _inflate(body: bytes, max_length: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        result = inflater.decompress(body, max_length)
    except zlib.error as exc:
        raise BodyDecompressionError(f"compressed body does not inflate: {exc}") from None
    if inflater.unconsumed_tail:
        raise BodyDecompressionError(f"compressed body inflates beyond {max_length} bytes")
    if not inflater.eof:
        raise BodyDecompressionError("compressed body is truncated")
    return result


def _with_library(module_name: str, label: str, body: bytes, max_length: int) -> bytes:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise BodyDecompressionError(
            f"{label} compressed body but the {module_name} package is not installed"
        ) from None
    try:
        if label == "LZ4":
            result: bytes = module.decompress(body)
        else:
            result = module.ZstdDecompressor().decompress(body, max_output_size=max_length)
    except Exception as exc:  # each library has its own error types
        raise BodyDecompressionError(f"{label} compressed body does not decode: {exc}") from None
    if len(result) > max_length:
        raise BodyDecompressionError(f"compressed body inflates beyond {max_length} bytes")
    return result
