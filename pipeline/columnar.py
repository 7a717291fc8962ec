"""Arrow assembly of the Spark source: the store's record columns as Arrow record batches.

Owns turning a range of one mapped segment into `pyarrow.RecordBatch`es of the source schema.
Finding and validating records is the store's `columns.walk`, decoding them its
`columns.decode_columns` (numpy path): the same decoder as `CommitLogReader`. What is left here
is Arrow: buffers, host text, message ids, TAGS/KEYS. Knows nothing of Spark or splits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.schema import ARROW_SCHEMA
from store.columns import decode_columns, walk
from store.decode import RecordFormatError
from store.message import decode_host, offset_msg_id
from store.record_columns import Packed, RecordColumns

# Spark pays a fixed cost per Arrow batch (measured: 2k-row batches scan at 0.6x the rate of 64k
# ones), so batches are large, and capped in bytes to bound memory and the int32 Arrow offsets.
ROWS_PER_BATCH: Final = 65536
BYTES_PER_BATCH: Final = 64 * 1024 * 1024
_IPV4_HOST_BYTES: Final = 8
_HEX: Final = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_TAGS_RE: Final = "(?:^|\x02)TAGS\x01(?P<v>[^\x02]*)"
_KEYS_RE: Final = "(?:^|\x02)KEYS\x01(?P<v>[^\x02]*)"
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")


class DataLossError(RuntimeError):
    """Records asked for were deleted (retention): below the first segment, or a segment gone
    between planning a read and reading it."""


class CorruptRecordError(RecordFormatError):
    """A record below the durable offset is not a valid record (or fails CRC when asked to fail)."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(offset, reason)
        self.args = (f"{path}: record at physical offset {offset}: {reason}",)
        self.path = path

    def __reduce__(self) -> tuple[type[CorruptRecordError], tuple[str, int, str]]:
        return CorruptRecordError, (self.path, self.offset, self.reason)


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """What to produce per record; a subset of the source options, shipped to every task."""

    include_body: bool = True
    verify_crc: bool = True
    fail_on_crc_error: bool = False
    topics: frozenset[str] | None = None
    #: a segment deleted before its split is read: DataLossError, or no rows for the split
    fail_on_data_loss: bool = True


@dataclass(frozen=True, slots=True)
class Segment:
    """One mapped segment: its bytes, its base physical offset and its path (for errors)."""

    data: Any  # a buffer: mmap.mmap or bytes
    base: int
    path: str


def read_range(
    segment: Segment, pos: int, stop: int, options: DecodeOptions
) -> Iterator[pa.RecordBatch]:
    """Batches of the records starting in `[pos, stop)` of the segment (`pos` a record start).

    Ends at a BLANK record; a header that is not a record raises CorruptRecordError after the
    batches of the records before it.
    """
    while pos < stop:
        run = walk(
            segment.data,
            pos,
            min(stop, pos + BYTES_PER_BATCH),
            base=segment.base,
            max_records=ROWS_PER_BATCH,
        )
        if run.positions:
            columns = decode(segment, run.positions, options)
            if len(columns):
                yield to_batch(columns)
        if run.error is not None:
            raise CorruptRecordError(segment.path, run.error.offset, run.error.reason)
        if run.ended or not run.positions:
            return
        pos = run.next_position


def decode(segment: Segment, positions: Sequence[int], options: DecodeOptions) -> RecordColumns:
    """The store's columns of the records at `positions`; errors name the segment's file."""
    try:
        columns = decode_columns(
            segment.data,
            positions,
            base=segment.base,
            include_body=options.include_body,
            verify_crc=options.verify_crc,
            topics=options.topics,
        )
    except RecordFormatError as exc:
        raise CorruptRecordError(segment.path, exc.offset, exc.reason) from None
    if options.fail_on_crc_error and columns.crc_ok is not None:
        ok = np.asarray(columns.crc_ok, dtype=bool)
        if not ok.all():
            first = int(np.flatnonzero(~ok)[0])
            offset = int(columns.physical_offset[first])
            raise CorruptRecordError(segment.path, offset, "body CRC mismatch")
    return columns


def to_batch(columns: RecordColumns) -> pa.RecordBatch:
    """One record batch of the source schema."""
    count = len(columns)
    physical_offset = np.asarray(columns.physical_offset, dtype=np.int64)
    props = _strings(columns.properties)
    arrays = {
        "physical_offset": pa.array(physical_offset),
        "size": _ints(columns.total_size, np.int32),
        "topic": _strings(columns.topic),
        "queue_id": _ints(columns.queue_id, np.int32),
        "queue_offset": _ints(columns.queue_offset, np.int64),
        "flag": _ints(columns.flag, np.int32),
        "sys_flag": _ints(columns.sys_flag, np.int32),
        "born_timestamp": _timestamp(columns.born_timestamp),
        "born_host": _hosts(columns.born_host),
        "store_timestamp": _timestamp(columns.store_timestamp),
        "store_host": _hosts(columns.store_host),
        "reconsume_times": _ints(columns.reconsume_times, np.int32),
        "prepared_transaction_offset": _ints(columns.prepared_transaction_offset, np.int64),
        "body_crc": _ints(columns.body_crc, np.int32),
        "crc_ok": (
            pa.nulls(count, pa.bool_())
            if columns.crc_ok is None
            else pa.array(np.asarray(columns.crc_ok, dtype=bool))
        ),
        "properties": props,
        "tags": _property(props, _TAGS_RE),
        "keys": _property(props, _KEYS_RE),
        "msg_id": _msg_ids(columns.store_host, physical_offset),
        "body": (
            pa.nulls(count, pa.binary())
            if columns.body is None
            else _varlen(columns.body, pa.binary())
        ),
    }
    return pa.RecordBatch.from_arrays(list(arrays.values()), schema=ARROW_SCHEMA)


def format_host(raw: bytes) -> str:
    """`a.b.c.d:port` or `[v6 address]:port` of an encoded host field."""
    address, port = decode_host(raw)
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _property(props: pa.Array, pattern: str) -> pa.Array:
    """The value matched by `pattern`'s group `v`, null where the property is absent.

    `flatten` carries the match struct's nulls into the field (`field` would drop them).
    """
    matched = pc.extract_regex(props, pattern=pattern)
    return matched.flatten()[0]


def _ints(column: Sequence[int], kind: type[np.signedinteger[Any]]) -> pa.Array:
    return pa.array(np.asarray(column, dtype=kind))


def _timestamp(millis: Sequence[int]) -> pa.Array:
    return pa.array(np.asarray(millis, dtype=np.int64) * 1000, type=_TIMESTAMP)


def _varlen(packed: Packed, kind: pa.DataType) -> pa.Array:
    offsets = np.asarray(packed.offsets, dtype=np.int32)
    return pa.Array.from_buffers(
        kind, len(packed), [None, pa.py_buffer(offsets), pa.py_buffer(packed.data)]
    )


def _strings(packed: Packed) -> pa.Array:
    return _varlen(packed, pa.string())


def _ipv4(packed: Packed) -> npt.NDArray[np.uint8] | None:
    """The host fields as rows of 8 bytes, when every host of the run is IPv4."""
    if len(packed.data) != _IPV4_HOST_BYTES * len(packed):
        return None
    return np.frombuffer(packed.data, dtype=np.uint8).reshape(len(packed), _IPV4_HOST_BYTES)


def _hosts(packed: Packed) -> pa.Array:
    """Host fields as "a.b.c.d:port" / "[v6]:port", formatted once per distinct IPv4 value."""
    raw = _ipv4(packed)
    if raw is None:
        return pa.array([format_host(host) for host in packed.tolist()], pa.string())
    keys = np.ascontiguousarray(raw).view(">u8").ravel()
    unique, inverse = np.unique(keys, return_inverse=True)
    texts = [format_host(int(key).to_bytes(8, "big")) for key in unique.tolist()]
    indices = pa.array(inverse.astype(np.int32).ravel())
    return pa.DictionaryArray.from_arrays(indices, pa.array(texts, pa.string())).dictionary_decode()


def _msg_ids(store_host: Packed, physical_offset: npt.NDArray[np.int64]) -> pa.Array:
    """Offset message ids: hex of store address, port and physical offset."""
    hosts = _ipv4(store_host)
    if hosts is None:
        pairs = zip(store_host.tolist(), physical_offset.tolist(), strict=True)
        return pa.array([offset_msg_id(host, offset) for host, offset in pairs], pa.string())
    count = len(hosts)
    raw = np.empty((count, 16), dtype=np.uint8)
    raw[:, :8] = hosts
    raw[:, 8:] = physical_offset.astype(">i8").view(np.uint8).reshape(count, 8)
    chars = np.empty((count, 32), dtype=np.uint8)
    chars[:, 0::2] = _HEX[raw >> 4]
    chars[:, 1::2] = _HEX[raw & 0x0F]
    offsets = np.arange(0, 32 * (count + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())]
    )
