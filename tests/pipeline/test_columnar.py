"""The columnar decoder against the store's own decoder, on segments built with the store's
encoder in memory (no Spark, no files)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import columnar, layout
from pipeline.schema import ARROW_SCHEMA
from store import format as record_format
from store.message import (
    COMPRESSED_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    MessageExtBrokerInner,
    encode_host,
    offset_msg_id,
)
from store.status import AppendMessageStatus

SEGMENT = 8192


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
        encoded = record_format.encode_record(msg, 1_700_000_001_000 + queue_offset, 1 << 22)
        assert not isinstance(encoded, AppendMessageStatus)
        record = bytearray(encoded[0])
        if pos + len(record) + record_format.END_FILE_MIN_BLANK_LENGTH > size:
            break
        record_format.QUEUE_AND_PHYSICAL_OFFSET.pack_into(
            record, record_format.QUEUEOFFSET_POS, queue_offset, base + pos
        )
        data[pos : pos + len(record)] = record
        starts.append(pos)
        pos += len(record)
    record_format.BLANK_RECORD_HEADER.pack_into(
        data, pos, size - pos, record_format.BLANK_MAGIC_CODE
    )
    return data, starts


def data_end(data: bytearray, starts: list[int]) -> int:
    return starts[-1] + int(record_format.SIZE_MAGIC.unpack_from(data, starts[-1])[0])


def decode_all(
    data: bytearray, base: int = 0, options: columnar.DecodeOptions | None = None
) -> list[dict[str, object]]:
    segment = columnar.Segment(bytes(data), base, "seg")
    positions, _, ended = columnar.walk(segment, 0, len(data), 1 << 20)
    assert ended
    rows: list[dict[str, object]] = []
    for batch in columnar.decode(segment, positions, options or columnar.DecodeOptions()):
        assert batch.schema.equals(ARROW_SCHEMA)
        rows.extend(batch.to_pylist())
    return rows


def expected_row(data: bytearray, pos: int, base: int) -> dict[str, object]:
    rec = record_format.decode_record(bytes(data), pos, base_offset=base)
    return {
        "physical_offset": rec.physical_offset,
        "size": rec.total_size,
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "flag": rec.flag,
        "sys_flag": rec.sys_flag,
        "born_ms": rec.born_timestamp,
        "store_ms": rec.store_timestamp,
        "born_host": rec.born_host,
        "store_host": rec.store_host,
        "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset,
        "body_crc": rec.body_crc,
        "crc_ok": rec.crc_ok,
        "properties": rec.properties,
        "body": rec.body,
    }


def as_comparable(row: dict[str, object]) -> dict[str, object]:
    """A decoded row in the store decoder's terms (ms timestamps, (ip, port) hosts)."""
    out = dict(row)
    for name in ("born", "store"):
        stamp = out.pop(f"{name}_timestamp")
        out[f"{name}_ms"] = int(stamp.timestamp() * 1000)  # type: ignore[attr-defined]
        host, _, port = str(out[f"{name}_host"]).rpartition(":")
        out[f"{name}_host"] = (host.strip("[]"), int(port))
    for derived in ("tags", "keys", "msg_id"):
        out.pop(derived)
    return out


def test_every_field_equals_the_store_decoder() -> None:
    msgs = [message(i) for i in range(1, 30)]
    data, starts = build_segment(msgs, base=SEGMENT * 3)
    rows = decode_all(data, base=SEGMENT * 3)
    assert [row["physical_offset"] for row in rows] == [SEGMENT * 3 + p for p in starts]
    for row, pos in zip(rows, starts, strict=True):
        assert as_comparable(row) == expected_row(data, pos, SEGMENT * 3)
        index = row["flag"]
        assert row["tags"] == f"tag{index}" and row["keys"] == f"k{index} x{index}"


def test_ipv6_compressed_and_transaction_records_in_one_segment() -> None:
    msgs = [
        message(1),
        message(2, born_host=("::1", 5000)),
        message(3, store_host=("fe80::1", 10911), born_host=("2001:db8::7", 1)),
        message(4, body=zlib.compress(b"x" * 5000), sys_flag=COMPRESSED_FLAG | 0x300),
        message(5, sys_flag=TRANSACTION_PREPARED_TYPE),
        message(6, sys_flag=TRANSACTION_COMMIT_TYPE, prepared_transaction_offset=123),
        message(7, born_host=("::ffff:10.1.2.3", 7)),
    ]
    data, starts = build_segment(msgs)
    rows = decode_all(data)
    assert len(rows) == len(msgs)
    for row, pos in zip(rows, starts, strict=True):
        assert as_comparable(row) == expected_row(data, pos, 0)
    assert rows[1]["born_host"] == "[::1]:5000"
    assert rows[2]["store_host"] == "[fe80::1]:10911"
    assert rows[6]["born_host"] == "10.1.2.3:7"
    assert rows[3]["body"] == msgs[3].body and rows[3]["sys_flag"] == COMPRESSED_FLAG | 0x300
    assert rows[5]["prepared_transaction_offset"] == 123


def test_msg_ids_equal_the_store_offset_msg_ids() -> None:
    data, starts = build_segment(
        [message(1), message(2, store_host=("::2", 9)), message(3)], base=SEGMENT
    )
    rows = decode_all(data, base=SEGMENT)
    hosts = [("192.168.1.2", 10911), ("::2", 9), ("192.168.1.2", 10911)]
    for row, pos, host in zip(rows, starts, hosts, strict=True):
        raw = encode_host(host)[0]
        assert row["msg_id"] == offset_msg_id(raw, SEGMENT + pos)


def test_flipped_body_byte_and_options() -> None:
    data, starts = build_segment([message(i) for i in range(10, 20)])
    body_at = starts[4] + layout.BODY_POS
    data[body_at] ^= 0xFF
    rows = decode_all(data)
    assert [row["crc_ok"] for row in rows].count(False) == 1
    assert rows[4]["crc_ok"] is False
    quiet = decode_all(data, options=columnar.DecodeOptions(include_body=False, verify_crc=False))
    assert all(row["body"] is None and row["crc_ok"] is None for row in quiet)
    with pytest.raises(columnar.CorruptRecordError, match="CRC") as caught:
        decode_all(data, options=columnar.DecodeOptions(fail_on_crc_error=True))
    assert caught.value.offset == starts[4]


def test_topic_filter_keeps_only_those_topics() -> None:
    data, _ = build_segment([message(i) for i in range(30)])
    rows = decode_all(data, options=columnar.DecodeOptions(topics=frozenset({"topic-1"})))
    assert rows and {row["topic"] for row in rows} == {"topic-1"}
    assert len(rows) == len([i for i in range(30) if i % 3 == 1])


def test_blank_shorter_than_a_header_ends_the_walk() -> None:
    data, starts = build_segment([message(1), message(2)], size=4096)
    end = data_end(data, starts)
    short = bytearray(data[: end + 40])
    record_format.BLANK_RECORD_HEADER.pack_into(short, end, 40, record_format.BLANK_MAGIC_CODE)
    segment = columnar.Segment(bytes(short), 0, "seg")
    positions, pos, ended = columnar.walk(segment, 0, len(short), 100)
    assert (positions, pos, ended) == (starts, end, True)


def test_zeros_end_the_walk_and_garbage_is_corruption() -> None:
    data, starts = build_segment([message(1), message(2)])
    end = data_end(data, starts)
    zeros = bytearray(data)
    zeros[end : end + 8] = bytes(8)
    segment = columnar.Segment(bytes(zeros), 0, "seg")
    assert columnar.walk(segment, 0, SEGMENT, 100)[:2] == (starts, end)
    zeros[end : end + 8] = b"\x00\x00\x00\x10garb"
    with pytest.raises(columnar.CorruptRecordError) as caught:
        columnar.walk(columnar.Segment(bytes(zeros), 0, "seg"), 0, SEGMENT, 100)
    assert caught.value.offset == end


def test_size_field_that_disagrees_with_lengths_is_corruption() -> None:
    data, starts = build_segment([message(1), message(2), message(3)])
    bad = bytearray(data)
    record_format.INT32.pack_into(bad, starts[1] + layout.BODY_POS - 4, 5)  # body length
    segment = columnar.Segment(bytes(bad), 0, "seg")
    with pytest.raises(columnar.CorruptRecordError) as caught:
        list(columnar.decode(segment, starts, columnar.DecodeOptions()))
    assert caught.value.offset == starts[1]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=200), st.text(max_size=40), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_arbitrary_bodies_and_properties_round_trip(
    items: list[tuple[bytes, str, bool]],
) -> None:
    msgs = [
        message(
            i, body=body, properties_string=props, born_host=("::9", 1) if v6 else ("1.2.3.4", 1)
        )
        for i, (body, props, v6) in enumerate(items)
    ]
    data, starts = build_segment(msgs, size=1 << 16)
    rows = decode_all(data)
    assert [row["body"] for row in rows] == [m.body for m in msgs]
    assert [row["properties"] for row in rows] == [m.properties_string for m in msgs]
    assert all(row["crc_ok"] for row in rows)
    for row, pos in zip(rows, starts, strict=True):
        assert as_comparable(row) == expected_row(data, pos, 0)
