"""The message index built a run of records at a time, in array operations (numpy).

`run_keys` finds and hashes the keys of a run; `put_keys` appends them to an `IndexFile`.

What the index takes of a record is 4.9's `IndexService.buildIndex`: nothing of a transaction
ROLLBACK; else its UNIQ_KEY, then each non-empty space-separated entry of KEYS, each as
`topic#key`, hashed by `indexKeyHashMethod` (abs of Java's String.hashCode, 0 for int32's
minimum). `run_keys` gives the same keys in the same order as `index_file.index_keys` and
`index_file.key_hash` on each decoded record, with no Python work per record: the stored
properties of the run are searched as one byte array (a property's name follows a 0x02 or starts
the record's properties, its value runs to the next 0x02 or the properties' end), and the
hashes are sums of byte times power of 31 modulo 2**32. A key or topic with bytes past ASCII is
hashed on its decoded text, as Java hashes UTF-16 units.

`put_keys` writes the bytes `IndexFile.put_key` would write key by key: each item chains to the
previous item of its slot (in the run, or before it), each slot names its newest item. Imported
by the index service only when numpy is there; without it the service puts keys one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from store.index.index_file import HEADER_SIZE, INVALID_INDEX, ITEM, ITEM_SIZE, IndexFile, java_hash
from store.index.locate import RunFields
from store.message import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from store.record_columns import Packed, RecordColumns

Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]
Hashes = npt.NDArray[np.uint32]

_NAME_END: Final = 1  # between a property's name and its value
_PROPERTY_END: Final = 2  # after a property's value
_SPACE: Final = 0x20
_HASH_SIGN: Final = 0x23  # '#', between topic and key
_EMPTY: Final = np.zeros(0, dtype=np.int64)
#: 31 ** k modulo 2 ** 32 for every k a span of one record can need (properties < 64 KiB)
_POWERS: Final = np.cumprod(
    np.concatenate(([1], np.full((1 << 16) + 1, 31))).astype(np.uint32), dtype=np.uint32
)


_ITEM_DTYPE: Final = np.dtype(
    [("hash", ">i4"), ("offset", ">i8"), ("diff", ">i4"), ("previous", ">i4")]
)
assert _ITEM_DTYPE.itemsize == ITEM.size == ITEM_SIZE


@dataclass(frozen=True, slots=True)
class RunKeys:
    """Keys in index order: each key's `key_hash`, its record's offset and store time."""

    hashed: Ints
    offsets: Ints
    timestamps: Ints

    def __len__(self) -> int:
        return len(self.hashed)

    def from_offset(self, offset: int) -> RunKeys:
        """The keys of the records at or past `offset`."""
        keep = self.offsets >= offset
        return RunKeys(self.hashed[keep], self.offsets[keep], self.timestamps[keep])

    def skip(self, count: int) -> RunKeys:
        return RunKeys(self.hashed[count:], self.offsets[count:], self.timestamps[count:])


def run_keys(columns: RecordColumns | RunFields) -> RunKeys:
    """The keys 4.9 indexes of the records of `columns`, in the order it puts them."""
    props, offsets = _packed(columns.properties)
    uniq_rec, uniq_start, uniq_end = _first_values(props, offsets, b"UNIQ_KEY")
    keys_rec, keys_start, keys_end = _first_values(props, offsets, b"KEYS")
    keys_rec, keys_start, keys_end = _split(props, keys_rec, keys_start, keys_end)
    record = np.concatenate((uniq_rec, keys_rec))
    start = np.concatenate((uniq_start, keys_start))
    end = np.concatenate((uniq_end, keys_end))
    kind = np.concatenate((np.zeros(len(uniq_rec), np.int64), np.ones(len(keys_rec), np.int64)))
    sys_flag = np.asarray(columns.sys_flag, dtype=np.int64)
    rollback = (sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE
    keep = (end > start) & ~rollback[record]
    record, start, end, kind = record[keep], start[keep], end[keep], kind[keep]
    order = np.lexsort((start, kind, record))  # a record's UNIQ_KEY, then its KEYS in order
    record, start, end = record[order], start[order], end[order]
    topics, topic_offsets = _packed(columns.topic)
    topic_hash, topic_wide = _span_hashes(topics, topic_offsets[:-1], topic_offsets[1:])
    key_hash, key_wide = _span_hashes(props, start, end)
    length = end - start
    full = topic_hash[record] * _POWERS[length + 1] + np.uint32(_HASH_SIGN) * _POWERS[length]
    full += key_hash
    for i in np.flatnonzero(key_wide | topic_wide[record]).tolist():
        rec = int(record[i])
        topic = bytes(topics[topic_offsets[rec] : topic_offsets[rec + 1]])
        key = bytes(props[start[i] : end[i]])
        text = f"{topic.decode(errors='replace')}#{key.decode(errors='replace')}"
        full[i] = java_hash(text) & 0xFFFFFFFF
    hashed = np.abs(full.view(np.int32).astype(np.int64))
    hashed[hashed > 0x7FFFFFFF] = 0
    offsets = np.asarray(columns.physical_offset, dtype=np.int64)[record]
    timestamps = np.asarray(columns.store_timestamp, dtype=np.int64)[record]
    return RunKeys(hashed, offsets, timestamps)


def _packed(column: Packed) -> tuple[Bytes, Ints]:
    data = np.frombuffer(column.data, dtype=np.uint8)
    return data, np.asarray(column.offsets, dtype=np.int64)


def _first_values(data: Bytes, offsets: Ints, name: bytes) -> tuple[Ints, Ints, Ints]:
    """(record, value start, value end) of the first property `name` of each record that has
    one, positions in `data` (`offsets`: where each record's properties start, then the end).

    Candidates are where the name's first four bytes stand (one compare of a big-endian word at
    every byte of the run); the rest of the name, the 0x01 after it and the 0x02 or record
    start before it are checked at the candidates only."""
    size = len(name)
    if len(data) <= size:
        return _EMPTY, _EMPTY, _EMPTY
    words = np.ndarray((len(data) - 3,), dtype=">u4", buffer=data, strides=(1,))
    starts = np.flatnonzero(words[: len(data) - size] == int.from_bytes(name[:4], "big"))
    for at in range(4, size - 3, 4):
        starts = starts[words[starts + at] == int.from_bytes(name[at : at + 4], "big")]
    starts = starts[data[starts + size] == _NAME_END]
    record = np.searchsorted(offsets, starts, side="right") - 1
    first = offsets[record]
    before = data[np.maximum(starts - 1, 0)]
    found = (starts == first) | ((starts > first) & (before == _PROPERTY_END))
    found &= starts + size < offsets[record + 1]
    record, value_start = record[found], starts[found] + size + 1
    once = np.ones(len(record), dtype=bool)
    once[1:] = record[1:] != record[:-1]
    record, value_start = record[once], value_start[once]
    ends = np.append(np.flatnonzero(data == _PROPERTY_END), len(data))
    value_end = np.minimum(ends[np.searchsorted(ends, value_start)], offsets[record + 1])
    return record, value_start, value_end


def _split(data: Bytes, record: Ints, start: Ints, end: Ints) -> tuple[Ints, Ints, Ints]:
    """The entries of the values [start, end) split at each space (empty entries included)."""
    spaces = np.flatnonzero(data == _SPACE)
    value = np.searchsorted(start, spaces, side="right") - 1
    inside = value >= 0
    inside[inside] = spaces[inside] < end[value[inside]]
    spaces = spaces[inside]
    # entries do not overlap and are in order: their starts and ends pair up once sorted
    entry_start = np.sort(np.concatenate((start, spaces + 1)))
    entry_end = np.sort(np.concatenate((spaces, end)))
    entry_record = record[np.searchsorted(start, entry_start, side="right") - 1]
    return entry_record, entry_start, entry_end


def _span_hashes(data: Bytes, start: Ints, end: Ints) -> tuple[Hashes, npt.NDArray[np.bool_]]:
    """Java's String.hashCode of each span of ASCII bytes (as uint32), and which spans hold a
    byte past ASCII (their hash is not the Java one)."""
    hashes = np.zeros(len(start), dtype=np.uint32)
    wide = np.zeros(len(start), dtype=bool)
    length = end - start
    some = np.flatnonzero(length > 0)
    if len(some) == 0:
        return hashes, wide
    start, length = start[some], length[some]
    first = np.cumsum(length) - length  # where each span starts in the gathered bytes
    total = int(first[-1] + length[-1])
    index = np.repeat(start - first, length) + np.arange(total)
    power = np.repeat(start + length - 1, length) - index
    gathered = data[index]
    terms: Any = gathered.astype(np.uint32) * _POWERS[power]
    hashes[some] = np.add.reduceat(terms, first, dtype=np.uint32)
    wide[some] = np.maximum.reduceat(gathered, first) >= 0x80
    return hashes, wide


def put_keys(index_file: IndexFile, keys: RunKeys) -> int:
    """`index_file.put_key` for each key in turn; how many were put before the file was full."""
    first = index_file.count
    n = max(min(len(keys), index_file.index_num - first), 0)
    if n == 0:
        return 0
    hashed, offsets, timestamps = keys.hashed[:n], keys.offsets[:n], keys.timestamps[:n]
    item_pos = index_file.reserve_items(n)
    begin = np.full(n, index_file.begin_timestamp, dtype=np.int64)
    if first <= 1:  # the file's first item sets the begin time of the items after it
        begin[1:] = timestamps[0]
    diff = np.where(begin > 0, np.clip((timestamps - begin) // 1000, 0, 0x7FFFFFFF), 0)
    numbers = np.arange(first, first + n, dtype=np.int64)
    all_slots = hashed % index_file.hash_slot_num
    order = np.argsort(all_slots, kind="stable")  # by slot, each slot's items in run order
    slots, numbers_sorted = all_slots[order], numbers[order]
    oldest = np.ones(n, dtype=bool)  # a slot's first item in the run
    oldest[1:] = slots[1:] != slots[:-1]
    newest = np.append(oldest[1:], True)
    previous_sorted = np.empty(n, dtype=np.int64)
    previous_sorted[1:] = numbers_sorted[:-1]
    mm = index_file.mm
    table = np.frombuffer(mm, dtype=">i4", count=index_file.hash_slot_num, offset=HEADER_SIZE)
    try:
        before = table[slots[oldest]].astype(np.int64)
        chained = (before > INVALID_INDEX) & (before <= numbers_sorted[oldest])
        previous_sorted[oldest] = np.where(chained, before, INVALID_INDEX)
        previous = np.empty(n, dtype=np.int64)
        previous[order] = previous_sorted
        items = np.empty(n, dtype=_ITEM_DTYPE)
        items["hash"], items["offset"], items["diff"] = hashed, offsets, diff
        items["previous"] = previous
        # the items, then the slots, then the count, as `put_key` writes them
        mm[item_pos : item_pos + n * ITEM_SIZE] = items.tobytes()
        table[slots[newest]] = numbers_sorted[newest]
    finally:
        del table  # no export of the mapping stays: it can be closed
    if first <= 1:
        index_file.begin_offset = int(offsets[0])
        index_file.begin_timestamp = int(timestamps[0])
    index_file.slot_count += int(np.count_nonzero(~chained))
    index_file.count = first + n
    index_file.end_offset, index_file.end_timestamp = int(offsets[-1]), int(timestamps[-1])
    return n
