"""ConsumeQueue: units on real files, rollover across small files, reload and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue
from store.message import java_string_hash


def test_java_string_hash_matches_java() -> None:
    # Values from Java: "TagA".hashCode(), "".hashCode(), "hello world".hashCode()
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("") == 0
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("\u00e9t\u00e9") == 227742  # 233*31**2 + 116*31 + 233


def test_append_read_rollover_and_reload(tmp_path: Path) -> None:
    cq = ConsumeQueue(str(tmp_path), "T", 3, units_per_file=4)
    for i in range(10):
        assert cq.append(i, 100 * i + 7, 50, i)
    assert not cq.append(9, 907, 50, 9)  # already there: a re-dispatch is ignored
    files = sorted((tmp_path / "consumequeue" / "T" / "3").iterdir())
    assert [f.name for f in files] == [f"{n * 4 * CQ_STORE_UNIT_SIZE:020d}" for n in range(3)]
    assert all(f.stat().st_size == 4 * CQ_STORE_UNIT_SIZE for f in files)
    units = cq.read_units(2, 100)
    assert [u.queue_offset for u in units] == [2, 3]  # one file at a time
    cq.close()
    again = ConsumeQueue(str(tmp_path), "T", 3, units_per_file=4)
    assert (again.min_logic_offset, again.max_logic_offset) == (0, 10)
    assert again.max_physical_offset == 957
    unit = again.get(5)
    assert unit is not None and (unit.physical_offset, unit.size, unit.tags_code) == (507, 50, 5)
    assert again.get(10) is None
    again.close()


def test_truncate_drops_units_at_or_past_the_commit_log_end(tmp_path: Path) -> None:
    cq = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=4)
    for i in range(9):
        cq.append(i, 100 * i, 100, 0)
    cq.truncate_dirty_logic_files(500)
    assert cq.max_logic_offset == 5 and cq.max_physical_offset == 500
    assert len(list((tmp_path / "consumequeue" / "T" / "0").iterdir())) == 2
    cq.close()
    again = ConsumeQueue(str(tmp_path), "T", 0, units_per_file=4)
    assert again.max_logic_offset == 5
    assert again.append(5, 500, 100, 0)
    again.close()


@settings(max_examples=25, deadline=None)
@given(st.text(max_size=20))
def test_java_string_hash_is_int32(text: str) -> None:
    value = java_string_hash(text)
    assert -(1 << 31) <= value < (1 << 31)


def test_the_first_flush_after_a_new_file_makes_its_name_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    monkeypatch.setattr("store.consume_queue.fsync_dir", synced.append)
    queue = ConsumeQueue(str(tmp_path), "T", 3, units_per_file=4)
    queue.append(0, 0, 100, 0)
    queue.flush()
    base = tmp_path / "consumequeue"
    # the store root too: it names consumequeue/ once the first queue file creates it
    assert synced == [str(base / "T" / "3"), str(base / "T"), str(base), str(tmp_path)]
    queue.append(1, 100, 100, 0)  # same file: no new name
    queue.flush()
    assert len(synced) == 4
    for n in range(2, 5):  # the fifth unit opens the second file
        queue.append(n, 100 * n, 100, 0)
    queue.flush()
    assert synced[4:] == [str(base / "T" / "3"), str(base / "T"), str(base), str(tmp_path)]
    queue.close()
