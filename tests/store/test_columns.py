"""store.columns: the header walk and the column-wise decoder, both paths against each other and
against `decode_record`, on segments built in memory with the store's encoder."""

from __future__ import annotations

import subprocess
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import decode, encode, layout
from store.columns import decode_columns, walk
from store.decode import RecordFormatError
from store.message import (
    COMPRESSED_FLAG,
    TRANSACTION_PREPARED_TYPE,
    MessageExtBrokerInner,
)
from store.record_columns import RecordColumns
from store.status import AppendMessageStatus

SEGMENT = 8192
ROOT = Path(__file__).resolve().parents[2]
BODY_POS = layout.HEADER_V4.size


def fast_decode(
    data: bytes | bytearray, starts: list[int], **options: object
) -> RecordColumns | None:
    """The numpy path alone (imported here: this module must import without numpy)."""
    from store import columns_fast

    return columns_fast.decode(
        data,
        starts,
        base=int(options.get("base", 0)),  # type: ignore[call-overload]
        limit=len(data),
        include_body=bool(options.get("include_body", True)),
        verify_crc=bool(options.get("verify_crc", True)),
        topics=options.get("topics"),  # type: ignore[arg-type]
    )


def message(index: int, **changes: object) -> MessageExtBrokerInner:
    msg = MessageExtBrokerInner(
        topic=f"topic-{index % 3}",
        queue_id=index % 4,
        body=bytes([index % 251]) * (index * 7 % 300),
        properties_string=f"TAGS\x01tag{index}\x02KEYS\x01k{index} x{index}\x02CLUSTER\x01c\x02",
        flag=index,
        born_timestamp=1_700_000_000_000 + index,
        born_host=("10.0.0.7", 40000 + index),
        store_host=("192.168.1.2", 10911),
        reconsume_times=index % 2,
    )
    for name, value in changes.items():
        setattr(msg, name, value)
    return msg


def build_segment(
    msgs: Sequence[MessageExtBrokerInner], base: int = 0, size: int = SEGMENT
) -> tuple[bytearray, list[int]]:
    """Records appended the way the writer does (offsets patched), then a BLANK tail."""
    data = bytearray(size)
    starts: list[int] = []
    pos = 0
    for queue_offset, msg in enumerate(msgs):
        encoded = encode.encode_record(msg, 1_700_000_001_000 + queue_offset, 1 << 22)
        assert not isinstance(encoded, AppendMessageStatus)
        record = bytearray(encoded[0])
        if pos + len(record) + layout.END_FILE_MIN_BLANK_LENGTH > size:
            break
        layout.QUEUE_AND_PHYSICAL_OFFSET.pack_into(
            record, layout.QUEUEOFFSET_POS, queue_offset, base + pos
        )
        data[pos : pos + len(record)] = record
        starts.append(pos)
        pos += len(record)
    layout.BLANK_RECORD_HEADER.pack_into(data, pos, size - pos, layout.BLANK_MAGIC_CODE)
    return data, starts


def data_end(data: bytearray, starts: list[int]) -> int:
    return starts[-1] + int(layout.SIZE_MAGIC.unpack_from(data, starts[-1])[0])


def both_paths(
    data: bytes | bytearray, starts: list[int], **options: object
) -> dict[str, list[Any] | None]:
    """The pure and the numpy results, which must be equal; the numpy path must take the run."""
    pure = decode_columns(data, starts, vectorised=False, **options)  # type: ignore[arg-type]
    fast = fast_decode(data, starts, **options)
    assert fast is not None
    assert fast.to_pydict() == pure.to_pydict()
    assert list(fast.records()) == list(pure.records())
    return pure.to_pydict()


def test_walk_finds_every_record_and_stops_at_the_blank() -> None:
    data, starts = build_segment([message(i) for i in range(1, 20)])
    run = walk(data, 0, SEGMENT)
    end = data_end(data, starts)
    assert run.positions == starts and run.ended and run.error is None
    assert run.next_position == end
    assert run.sizes == [b - a for a, b in zip(starts, [*starts[1:], end], strict=True)]


def test_walk_stop_limit_and_max_records() -> None:
    data, starts = build_segment([message(i) for i in range(1, 20)])
    middle = walk(data, starts[3], starts[7] + 1)
    assert middle.positions == starts[3:8] and middle.next_position == starts[8]
    assert not middle.ended
    capped = walk(data, 0, SEGMENT, max_records=4)
    assert capped.positions == starts[:4] and capped.next_position == starts[4]
    short = walk(data, 0, SEGMENT, limit=starts[6] + 10, base=SEGMENT)
    assert short.positions == starts[:6]
    assert short.error is not None and short.error.offset == SEGMENT + starts[6]
    assert "out of bounds" in short.error.reason


def test_walk_reports_zeros_garbage_and_short_blanks() -> None:
    data, starts = build_segment([message(1), message(2), message(3)])
    end = data_end(data, starts)
    zeros = bytearray(data)
    zeros[end : end + 8] = bytes(8)
    run = walk(zeros, 0, SEGMENT, base=SEGMENT * 2)
    assert run.positions == starts and run.next_position == end and not run.ended
    assert run.error is not None and run.error.reason == "no magic code"
    assert run.error.offset == SEGMENT * 2 + end
    zeros[starts[1] + 4 : starts[1] + 8] = b"garb"
    garbage = walk(zeros, 0, SEGMENT)
    assert garbage.positions == starts[:1] and garbage.error is not None
    assert garbage.error.reason.startswith("bad magic code")
    blank = bytearray(data)
    layout.BLANK_RECORD_HEADER.pack_into(blank, end, 40, layout.BLANK_MAGIC_CODE)
    assert walk(blank[: end + 40], 0, SEGMENT).ended
    wrong = walk(blank, 0, SEGMENT)
    assert wrong.error is not None and "does not reach the end" in wrong.error.reason


def test_columns_equal_decode_record_in_both_paths() -> None:
    msgs = [message(i) for i in range(1, 30)]
    data, starts = build_segment(msgs, base=SEGMENT * 3)
    cols = both_paths(data, starts, base=SEGMENT * 3)
    expected = [decode.decode_record(data, p, base_offset=SEGMENT * 3) for p in starts]
    records = list(decode_columns(data, starts, base=SEGMENT * 3).records())
    assert records == expected
    assert cols["topic"] == [m.topic.encode() for m in msgs]
    assert cols["properties"] == [m.properties_string.encode() for m in msgs]
    assert cols["body"] == [m.body for m in msgs]
    assert cols["physical_offset"] == [SEGMENT * 3 + p for p in starts]


def test_mixed_host_layouts_go_to_the_pure_path() -> None:
    msgs = [
        message(1),
        message(2, born_host=("::1", 5000)),
        message(3, store_host=("fe80::1", 10911), born_host=("2001:db8::7", 1)),
        message(4, body=zlib.compress(b"x" * 5000), sys_flag=COMPRESSED_FLAG | 0x300),
        message(5, sys_flag=TRANSACTION_PREPARED_TYPE),
    ]
    data, starts = build_segment(msgs)
    assert fast_decode(data, starts) is None
    records = list(decode_columns(data, starts).records())
    assert records == [decode.decode_record(data, p) for p in starts]
    assert records[1].born_host == ("::1", 5000) and records[2].store_host == ("fe80::1", 10911)
    v6 = [message(i, store_host=("fe80::1", 9), born_host=("::2", 7)) for i in range(6)]
    data, starts = build_segment(v6)
    both_paths(data, starts)  # one IPv6 layout throughout: the numpy path takes it


def test_options_crc_and_topics_in_both_paths() -> None:
    data, starts = build_segment([message(i) for i in range(10, 30)])
    data[starts[4] + BODY_POS] ^= 0xFF
    cols = both_paths(data, starts)
    assert cols["crc_ok"] == [i != 4 for i in range(len(starts))]
    quiet = both_paths(data, starts, include_body=False, verify_crc=False)
    assert quiet["body"] is None and quiet["crc_ok"] is None
    assert quiet["body_crc"] == cols["body_crc"]
    only = both_paths(data, starts, topics=frozenset({"topic-1"}))
    assert only["topic"] == [b"topic-1"] * len([i for i in range(10, 30) if i % 3 == 1])
    none = decode_columns(data, starts, topics=frozenset({"absent"}))
    assert len(none) == 0 and list(none.records()) == []


def _corrupt_body_length(data: bytearray, pos: int) -> None:
    layout.INT32.pack_into(data, pos + BODY_POS - 4, -1)


def _corrupt_physical_offset(data: bytearray, pos: int) -> None:
    layout.INT64.pack_into(data, pos + layout.PHYSICALOFFSET_POS, 12345)


def _corrupt_total_size(data: bytearray, pos: int) -> None:
    total = int(layout.INT32.unpack_from(data, pos)[0])
    layout.INT32.pack_into(data, pos, total - 1)


@pytest.mark.parametrize(
    ("corrupt", "reason"),
    [
        (_corrupt_body_length, "body length"),
        (_corrupt_physical_offset, "physical offset field 12345"),
        (_corrupt_total_size, "does not match the field lengths"),
    ],
)
def test_bad_records_raise_the_same_error_in_both_paths(corrupt: object, reason: str) -> None:
    data, starts = build_segment([message(i) for i in range(1, 12)], base=SEGMENT)
    assert callable(corrupt)
    corrupt(data, starts[6])
    errors = []
    for vectorised in (None, False):
        with pytest.raises(RecordFormatError) as caught:
            decode_columns(data, starts, base=SEGMENT, vectorised=vectorised)
        errors.append((caught.value.offset, caught.value.reason))
    assert errors[0] == errors[1]
    assert errors[0][0] == SEGMENT + starts[6] and reason in errors[0][1]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=200), st.text(max_size=40), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
    st.booleans(),
)
def test_arbitrary_records_decode_identically(
    items: list[tuple[bytes, str, bool]], include_body: bool, verify_crc: bool
) -> None:
    host = ("::9", 1) if items[0][2] else ("1.2.3.4", 1)  # one layout: the numpy path takes it
    msgs = [
        message(i, body=body, properties_string=props, store_host=host)
        for i, (body, props, _) in enumerate(items)
    ]
    data, starts = build_segment(msgs, size=1 << 16)
    cols = both_paths(bytes(data), starts, include_body=include_body, verify_crc=verify_crc)
    assert cols["properties"] == [m.properties_string.encode() for m in msgs]
    assert cols["body"] == ([m.body for m in msgs] if include_body else None)
    assert cols["crc_ok"] == ([True] * len(msgs) if verify_crc else None)


_NO_NUMPY = """
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError("numpy blocked")
        return None

sys.meta_path.insert(0, Blocker())
from store.columns import decode_columns, walk
from store.record_columns import RecordColumns
from store.reader import CommitLogReader
from tests.store.test_columns import build_segment, message

data, starts = build_segment([message(i) for i in range(1, 9)])
run = walk(data, 0, len(data))
records = list(decode_columns(data, run.positions).records())
assert [r.flag for r in records] == list(range(1, 9)), records
assert "numpy" not in sys.modules
print(len(records))
"""


def test_the_store_decodes_without_numpy() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _NO_NUMPY], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "8"
