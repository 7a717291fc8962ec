"""`IndexFile`: one file of the message index, in RocketMQ 4.9's layout.

A file is a 40-byte header, `hash_slot_num` slots of 4 bytes and `index_num` items of 20 bytes,
all big-endian:

- header: begin timestamp (int64), end timestamp (int64), begin physical offset (int64), end
  physical offset (int64), used slot count (int32), item count (int32; item 0 is never used, so
  an empty file says 1);
- slot `abs(java_hash(key)) % hash_slot_num`: the number of the newest item of that slot, 0 for
  none;
- item: the key's hash (int32), the record's commit-log offset (int64), its store time minus the
  begin timestamp in whole seconds (int32) and the number of the previous item of the same slot
  (int32, 0 ends the chain).

Items are appended in commit-log order, so a file's items can be cut back to a count
(`truncate`), after which the slots are rebuilt from the items kept: nothing a crash left
behind past the count stays reachable. The header lives in memory and reaches the file with
`flush`. Knows bytes and files, no trio, no locks: the service (`store.index.service`)
serializes its callers.
"""

from __future__ import annotations

import errno
import mmap
import operator
import os
import struct
import time
from typing import Final

from store.message import java_string_hash

HEADER_SIZE: Final = 40
SLOT_SIZE: Final = 4
ITEM_SIZE: Final = 20
#: begin ts, end ts, begin offset, end offset, slot count, item count
HEADER: Final = struct.Struct(">qqqqii")
ITEM: Final = struct.Struct(">iqii")
SLOT: Final = struct.Struct(">i")
INVALID_INDEX: Final = 0
#: item blocks are allocated this many bytes ahead (the header and slots when the file is made)
ITEM_CHUNK: Final = 1 << 20
#: items read at a time when the slots are rebuilt
TRUNCATE_CHUNK_ITEMS: Final = 50_000


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + hash_slot_num * SLOT_SIZE + index_num * ITEM_SIZE


def _property(properties: str, token: str) -> str | None:
    """The value of the property `token` (its name and \\x01) names, found without splitting
    the whole string."""
    pos = properties.find(token)
    while pos > 0 and properties[pos - 1] != "\x02":
        pos = properties.find(token, pos + 1)  # the token ends another property's name
    if pos < 0:
        return None
    start = pos + len(token)
    end = properties.find("\x02", start)
    return properties[start:] if end < 0 else properties[start:end]


def index_keys(properties: str) -> list[str]:
    """UNIQ_KEY first, then every non-empty KEYS entry (space-separated), of a stored
    properties string: what 4.9's `buildIndex` indexes of a record."""
    uniq = _property(properties, "UNIQ_KEY\x01")
    keys = _property(properties, "KEYS\x01")
    found = [uniq] if uniq else []
    if keys:
        found.extend(k for k in keys.split(" ") if k)
    return found


def java_hash(text: str) -> int:
    """`java_string_hash`, with the multiplications done in C for text of Latin-1 characters
    (each one UTF-16 unit): the index hashes a unique key of every message."""
    try:
        codes = text.encode("latin-1")
    except UnicodeEncodeError:
        return java_string_hash(text)
    length = len(codes)
    powers = _POWERS.get(length)
    if powers is None:
        if length > _POWERS_MAX_LENGTH:
            return java_string_hash(text)
        powers = _POWERS[length] = tuple(pow(31, length - 1 - i, 1 << 32) for i in range(length))
    value: int = sum(map(operator.mul, codes, powers)) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


#: length -> 31 ** (length - 1 - i) mod 2 ** 32, for i in range(length)
_POWERS: Final[dict[int, tuple[int, ...]]] = {}
_POWERS_MAX_LENGTH: Final = 512


def key_hash(key: str) -> int:
    """4.9's `indexKeyHashMethod`: abs of Java's String.hashCode, int32's minimum giving 0."""
    value = abs(java_hash(key))
    return 0 if value > 0x7FFFFFFF else value


class IndexFile:
    """One mapped index file; `path` is created (sparse) when missing."""

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        *,
        begin_offset: int = 0,
        begin_timestamp: int = 0,
    ) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._items_pos = HEADER_SIZE + hash_slot_num * SLOT_SIZE
        size = index_file_size(hash_slot_num, index_num)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        created = False
        try:
            created = os.fstat(self.fd).st_size == 0
            if created:
                os.ftruncate(self.fd, size)
                _allocate(self.fd, 0, self._items_pos)
            elif os.fstat(self.fd).st_size != size:
                raise ValueError(f"index file {path} is not {size} bytes: other limits")
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            if created:
                os.unlink(path)  # no half-made file for the next load to refuse
            raise
        #: the file's blocks are allocated below this position
        self._allocated = self._items_pos
        self.begin_timestamp, self.end_timestamp, self.begin_offset, self.end_offset = 0, 0, 0, 0
        self.slot_count, self.count = 0, 1
        if created:
            if begin_offset > 0:
                self.begin_offset = self.end_offset = begin_offset
            if begin_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = begin_timestamp
            self.write_header()
        else:
            self._load_header()

    def _load_header(self) -> None:
        fields = HEADER.unpack_from(self.mm, 0)
        self.begin_timestamp, self.end_timestamp, self.begin_offset, self.end_offset = fields[:4]
        self.slot_count = fields[4]
        self.count = fields[5] if 0 < fields[5] <= self.index_num else 1

    def write_header(self) -> None:
        HEADER.pack_into(
            self.mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_offset,
            self.end_offset,
            self.slot_count,
            self.count,
        )

    @property
    def is_full(self) -> bool:
        return self.count >= self.index_num

    @property
    def items(self) -> int:
        """Items held (the header's count less the unused item 0)."""
        return self.count - 1

    def _slot_pos(self, hashed: int) -> int:
        return HEADER_SIZE + (hashed % self.hash_slot_num) * SLOT_SIZE

    def put_key(self, key: str, offset: int, store_timestamp: int) -> bool:
        """Append an item for `key`; False when the file is full."""
        if self.count >= self.index_num:
            return False
        hashed = key_hash(key)
        slot_pos = self._slot_pos(hashed)
        previous = SLOT.unpack_from(self.mm, slot_pos)[0]
        if previous <= INVALID_INDEX or previous > self.count:
            previous = INVALID_INDEX
        if self.begin_timestamp <= 0:
            diff = 0
        else:
            diff = min(max((store_timestamp - self.begin_timestamp) // 1000, 0), 0x7FFFFFFF)
        number = self.count
        item_pos = self.reserve_items(1)
        # The item first, then the slot, then the count: a reader never follows a slot to an
        # item not yet written. The header's bytes are written by `flush` (only a load reads
        # them, and a load trusts the checkpoint's count, not theirs).
        ITEM.pack_into(self.mm, item_pos, hashed, offset, diff, previous)
        SLOT.pack_into(self.mm, slot_pos, number)
        if number <= 1:
            self.begin_offset = offset
            self.begin_timestamp = store_timestamp
        if previous == INVALID_INDEX:
            self.slot_count += 1
        self.count = number + 1
        self.end_offset = offset
        self.end_timestamp = store_timestamp
        return True

    def reserve_items(self, count: int) -> int:
        """Where the next `count` items go (their blocks allocated): past item `self.count`."""
        item_pos = self._items_pos + self.count * ITEM_SIZE
        if item_pos + count * ITEM_SIZE > self._allocated:
            self._allocate_items(item_pos + count * ITEM_SIZE)
        return item_pos

    def _allocate_items(self, needed: int) -> None:
        end = min(max(needed, self._allocated + ITEM_CHUNK), len(self.mm))
        _allocate(self.fd, self._allocated, end - self._allocated)
        self._allocated = end

    def item(self, number: int) -> tuple[int, int, int, int]:
        """(hash, offset, seconds since the begin timestamp, previous item) of item `number`."""
        fields: tuple[int, int, int, int] = ITEM.unpack_from(
            self.mm, self._items_pos + number * ITEM_SIZE
        )
        return fields

    def time_matched(self, begin: int, end: int) -> bool:
        """The file's time range overlaps [begin, end] (4.9's `isTimeMatched`)."""
        first, last = self.begin_timestamp, self.end_timestamp
        return (begin < first and end > last) or first <= begin <= last or first <= end <= last

    def select_offsets(
        self, found: list[int], key: str, max_num: int, begin: int, end: int
    ) -> None:
        """Append to `found` the offsets of `key`'s items stored within [begin, end], newest
        first, until `found` holds `max_num`. A hash match only: the caller checks the record."""
        hashed = key_hash(key)
        number = SLOT.unpack_from(self.mm, self._slot_pos(hashed))[0]
        count = self.count
        if number <= INVALID_INDEX or number >= count or count <= 1:
            return
        while len(found) < max_num:
            item_hash, offset, diff, previous = self.item(number)
            if diff < 0:
                break
            stored = self.begin_timestamp + diff * 1000
            if item_hash == hashed and begin <= stored <= end:
                found.append(offset)
            if previous <= INVALID_INDEX or previous >= number or stored < begin:
                break  # chains only go back; anything else is damage
            number = previous

    def truncate(self, count: int) -> None:
        """Keep the items below number `count`; rebuild the slots and the header from them."""
        count = max(1, min(count, self.index_num))
        self.mm[HEADER_SIZE : self._items_pos] = bytes(self._items_pos - HEADER_SIZE)
        newest: dict[int, int] = {}  # slot -> its newest item kept
        number = 1
        chunk = TRUNCATE_CHUNK_ITEMS * ITEM_SIZE
        end = self._items_pos + count * ITEM_SIZE
        for start in range(self._items_pos + ITEM_SIZE, end, chunk):
            data = self.mm[start : min(start + chunk, end)]  # a copy: no export of the mapping
            for item_hash, *_ in ITEM.iter_unpack(data):
                newest[item_hash % self.hash_slot_num] = number
                number += 1
        for slot, newest_number in newest.items():
            SLOT.pack_into(self.mm, HEADER_SIZE + slot * SLOT_SIZE, newest_number)
        self.slot_count = len(newest)
        self.count = count
        if count > 1:
            _, offset, last_diff, _ = self.item(count - 1)
            self.end_offset = offset
            # seconds were kept: the last second's end, so a time range never misses the item
            first = self.begin_timestamp + last_diff * 1000
            last = first + 999
            self.end_timestamp = self.end_timestamp if first <= self.end_timestamp <= last else last
        else:
            self.end_offset = self.begin_offset
            self.end_timestamp = self.begin_timestamp
        self.write_header()

    def first_number_at_or_past(self, offset: int) -> int:
        """The first item number whose commit-log offset is `offset` or more (items are in
        offset order); `count` when none is."""
        lo, hi = 1, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.item(mid)[1] < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def flush(self) -> None:
        self.write_header()
        self.mm.flush()

    def close(self) -> None:
        self.mm.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        os.unlink(self.path)


def _allocate(fd: int, offset: int, length: int) -> None:
    """Give the range its blocks now: a write into a hole of a mapping on a full disk would
    kill the process (SIGBUS); `posix_fallocate` fails here instead, with ENOSPC."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        # a file system without fallocate: the range stays a hole, as 4.9's files are


#: index files are named by their creation time, `yyyyMMddHHmmssSSS`
INDEX_NAME_LENGTH: Final = 17


def index_file_name(now_ms: int) -> str:
    """The name of an index file created at `now_ms` (local time, as 4.9 names them)."""
    seconds, millis = divmod(now_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{millis:03d}"


def is_index_name(name: str) -> bool:
    return len(name) == INDEX_NAME_LENGTH and name.isascii() and name.isdigit()
