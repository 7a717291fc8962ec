"""`IndexFile` on real mapped files: 4.9's byte layout, chains of one slot, hash collisions, a
full file, and the cut back to a count a restart makes."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from store.index.index_file import (
    HEADER,
    HEADER_SIZE,
    ITEM,
    ITEM_SIZE,
    SLOT_SIZE,
    IndexFile,
    index_file_size,
    java_hash,
    key_hash,
)
from store.message import java_string_hash

SLOTS = 8
ITEMS = 16
T0 = 1_700_000_000_000


def open_file(tmp_path: Path, name: str = "20240101000000000", **kw: int) -> IndexFile:
    return IndexFile(str(tmp_path / name), SLOTS, ITEMS, **kw)


def found(index_file: IndexFile, key: str, max_num: int = 64, begin: int = 0) -> list[int]:
    out: list[int] = []
    index_file.select_offsets(out, key, max_num, begin, 1 << 62)
    return out


def test_key_hash_is_the_absolute_java_hash() -> None:
    assert key_hash("Aa") == key_hash("BB") == 2112
    assert key_hash("T#polygenelubricants") >= 0
    assert key_hash("polygenelubricants") == 0  # Java's hashCode is int32's minimum there
    assert key_hash("T#k") == abs(java_string_hash("T#k"))


def test_bytes_on_disk_are_the_4_9_layout(tmp_path: Path) -> None:
    index_file = open_file(tmp_path)
    assert index_file.put_key("T#a", 1000, T0)
    assert index_file.put_key("T#b", 2000, T0 + 5_500)
    assert index_file.put_key("T#a", 3000, T0 + 9_000)
    index_file.flush()
    index_file.close()
    data = (tmp_path / "20240101000000000").read_bytes()
    assert len(data) == index_file_size(SLOTS, ITEMS) == HEADER_SIZE + SLOTS * 4 + ITEMS * 20
    begin_ts, end_ts, begin_off, end_off, slot_count, count = HEADER.unpack_from(data, 0)
    assert (begin_ts, end_ts, begin_off, end_off) == (T0, T0 + 9_000, 1000, 3000)
    assert (slot_count, count) == (2, 4)  # item 0 is never used
    items = HEADER_SIZE + SLOTS * SLOT_SIZE
    assert ITEM.unpack_from(data, items + ITEM_SIZE) == (key_hash("T#a"), 1000, 0, 0)
    assert ITEM.unpack_from(data, items + 2 * ITEM_SIZE) == (key_hash("T#b"), 2000, 5, 0)
    # the third item chains back to the first of its slot, and the slot names the third
    assert ITEM.unpack_from(data, items + 3 * ITEM_SIZE) == (key_hash("T#a"), 3000, 9, 1)
    slot = HEADER_SIZE + (key_hash("T#a") % SLOTS) * SLOT_SIZE
    assert struct.unpack_from(">i", data, slot)[0] == 3


def test_a_reopened_file_finds_its_keys_newest_first(tmp_path: Path) -> None:
    index_file = open_file(tmp_path)
    for n in range(6):
        index_file.put_key(f"T#k{n % 2}", 100 * n, T0 + n * 1000)
    index_file.flush()
    index_file.close()
    again = open_file(tmp_path)
    assert found(again, "T#k0") == [400, 200, 0]
    assert found(again, "T#k1", max_num=2) == [500, 300]
    assert found(again, "T#k0", begin=T0 + 1500) == [400, 200]
    assert found(again, "T#none") == []


def test_colliding_keys_share_a_chain_and_both_are_returned(tmp_path: Path) -> None:
    index_file = open_file(tmp_path)
    index_file.put_key("Aa", 10, T0)
    index_file.put_key("BB", 20, T0)
    index_file.put_key("Ab", 30, T0)  # another hash, maybe the same slot
    # the file knows hashes only: the caller reads the records to tell "Aa" from "BB"
    assert found(index_file, "Aa") == [20, 10]
    assert found(index_file, "BB") == [20, 10]
    assert found(index_file, "Ab") == [30]


def test_a_full_file_refuses_the_next_key(tmp_path: Path) -> None:
    index_file = open_file(tmp_path)
    for n in range(ITEMS - 1):
        assert index_file.put_key(f"T#{n}", n, T0)
    assert index_file.is_full
    assert not index_file.put_key("T#late", 99, T0)
    assert found(index_file, "T#late") == []


def test_a_new_file_begins_where_the_full_one_ended(tmp_path: Path) -> None:
    index_file = open_file(tmp_path, begin_offset=5000, begin_timestamp=T0)
    assert (index_file.begin_offset, index_file.end_offset) == (5000, 5000)
    assert (index_file.begin_timestamp, index_file.end_timestamp) == (T0, T0)
    assert index_file.items == 0


def test_truncate_forgets_later_items_and_rebuilds_the_slots(tmp_path: Path) -> None:
    index_file = open_file(tmp_path)
    for n in range(8):
        index_file.put_key(f"T#k{n % 3}", 100 * (n + 1), T0 + n * 1000)
    index_file.truncate(5)  # items 1..4 stay: offsets 100..400
    assert index_file.items == 4
    assert index_file.end_offset == 400
    assert T0 + 3000 <= index_file.end_timestamp <= T0 + 3999
    assert found(index_file, "T#k0") == [400, 100]
    assert found(index_file, "T#k1") == [200]
    assert found(index_file, "T#k2") == [300]
    # a new key goes on from the cut, and chains onto what was kept
    index_file.put_key("T#k0", 900, T0 + 9000)
    assert found(index_file, "T#k0") == [900, 400, 100]


def test_truncate_repairs_a_slot_a_crash_left_pointing_past_the_count(tmp_path: Path) -> None:
    index_file = open_file(tmp_path)
    index_file.put_key("T#a", 100, T0)
    index_file.put_key("T#a", 200, T0)
    index_file.flush()
    slot = HEADER_SIZE + (key_hash("T#a") % SLOTS) * SLOT_SIZE
    index_file.close()
    with open(tmp_path / "20240101000000000", "r+b") as handle:  # a later item's slot write
        handle.seek(slot)
        handle.write(struct.pack(">i", 7))
    again = open_file(tmp_path)
    assert found(again, "T#a") == []  # the chain is lost until the repair
    again.truncate(again.count)
    assert found(again, "T#a") == [200, 100]


def test_first_number_at_or_past_an_offset(tmp_path: Path) -> None:
    index_file = open_file(tmp_path)
    for n in range(5):
        index_file.put_key("T#a", 100 * n, T0)
    assert index_file.first_number_at_or_past(0) == 1
    assert index_file.first_number_at_or_past(250) == 4
    assert index_file.first_number_at_or_past(10_000) == index_file.count


def test_a_file_of_other_limits_is_refused(tmp_path: Path) -> None:
    open_file(tmp_path).close()
    try:
        IndexFile(str(tmp_path / "20240101000000000"), SLOTS * 2, ITEMS)
    except ValueError as exc:
        assert "other limits" in str(exc)
    else:
        raise AssertionError("a file of other limits was opened")
    assert os.path.getsize(tmp_path / "20240101000000000") == index_file_size(SLOTS, ITEMS)


def test_the_fast_hash_is_java_string_hash() -> None:
    samples = ["", "a", "Aa", "BB", "polygenelubricants", "T#" + "x" * 600, "é" * 40, "日本", "😀k"]
    samples += [f"Topic#7F0000011A2B3C4D5E6F{n:012d}" for n in range(50)]
    for text in samples:
        assert java_hash(text) == java_string_hash(text), text
