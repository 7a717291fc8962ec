"""Arrow assembly of the source: batches from the store's columns against the store's own
`decode_record`, on segments built with the store's encoder in memory (no Spark, no files)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import columnar
from pipeline.schema import ARROW_SCHEMA
from store import decode, layout
from store.message import (
    COMPRESSED_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    encode_host,
    offset_msg_id,
)
from tests.store.test_columns import SEGMENT, build_segment, data_end, message

BODY_POS = layout.HEADER_V4.size


def read_all(
    data: bytes | bytearray,
    base: int = 0,
    options: columnar.DecodeOptions | None = None,
    path: str = "seg",
) -> list[pa.RecordBatch]:
    segment = columnar.Segment(bytes(data), base, path)
    return list(columnar.read_range(segment, 0, len(data), options or columnar.DecodeOptions()))


def decode_all(
    data: bytearray, base: int = 0, options: columnar.DecodeOptions | None = None
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for batch in read_all(data, base, options):
        assert batch.schema.equals(ARROW_SCHEMA)
        rows.extend(batch.to_pylist())
    return rows


def expected_row(data: bytearray, pos: int, base: int) -> dict[str, object]:
    rec = decode.decode_record(bytes(data), pos, base_offset=base)
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


def check_rows(data: bytearray, starts: Sequence[int], base: int = 0) -> list[dict[str, object]]:
    rows = decode_all(data, base=base)
    assert [row["physical_offset"] for row in rows] == [base + p for p in starts]
    for row, pos in zip(rows, starts, strict=True):
        assert as_comparable(row) == expected_row(data, pos, base)
    return rows


def test_every_field_equals_the_store_decoder() -> None:
    data, starts = build_segment([message(i) for i in range(1, 30)], base=SEGMENT * 3)
    for row in check_rows(data, starts, base=SEGMENT * 3):
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
    rows = check_rows(data, starts)
    assert rows[1]["born_host"] == "[::1]:5000"
    assert rows[2]["store_host"] == "[fe80::1]:10911"
    assert rows[6]["born_host"] == "10.1.2.3:7"
    assert rows[3]["body"] == msgs[3].body and rows[3]["sys_flag"] == COMPRESSED_FLAG | 0x300
    assert rows[5]["prepared_transaction_offset"] == 123


def test_msg_ids_equal_the_store_offset_msg_ids() -> None:
    hosts = [("192.168.1.2", 10911), ("::2", 9), ("192.168.1.2", 10911)]
    # mixed host layouts (pure path), then IPv4 only (numpy path)
    for hosts_of_run in (hosts, [hosts[0]] * 3):
        msgs = [message(i, store_host=host) for i, host in enumerate(hosts_of_run, 1)]
        data, starts = build_segment(msgs, base=SEGMENT)
        rows = decode_all(data, base=SEGMENT)
        for row, pos, host in zip(rows, starts, hosts_of_run, strict=True):
            assert row["msg_id"] == offset_msg_id(encode_host(host)[0], SEGMENT + pos)


def test_flipped_body_byte_and_options() -> None:
    data, starts = build_segment([message(i) for i in range(10, 20)])
    data[starts[4] + BODY_POS] ^= 0xFF
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
    assert decode_all(data, options=columnar.DecodeOptions(topics=frozenset({"none"}))) == []


def test_zeros_and_garbage_are_corruption_naming_the_file() -> None:
    data, starts = build_segment([message(1), message(2)], base=SEGMENT)
    end = data_end(data, starts)
    broken = bytearray(data)
    broken[end : end + 8] = b"\x00\x00\x00\x10garb"
    with pytest.raises(columnar.CorruptRecordError) as caught:
        read_all(broken, base=SEGMENT, path="/x/seg")
    assert caught.value.offset == SEGMENT + end and caught.value.path == "/x/seg"
    assert "/x/seg" in str(caught.value)


def test_size_field_that_disagrees_with_lengths_is_corruption() -> None:
    data, starts = build_segment([message(1), message(2), message(3)])
    bad = bytearray(data)
    layout.INT32.pack_into(bad, starts[1] + BODY_POS - 4, 5)  # body length
    with pytest.raises(columnar.CorruptRecordError) as caught:
        read_all(bad)
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
    rows = check_rows(data, starts)
    assert [row["body"] for row in rows] == [m.body for m in msgs]
    assert [row["properties"] for row in rows] == [m.properties_string for m in msgs]
    assert all(row["crc_ok"] for row in rows)


def test_tags_and_keys_are_null_when_the_property_is_absent() -> None:
    props = ["", "a\x01b\x02", "TAGS\x01\x02", "KEYS\x01k1 k2\x02TAGS\x01t\x02"]
    data, starts = build_segment([message(i, properties_string=p) for i, p in enumerate(props)])
    rows = check_rows(data, starts)
    assert [row["tags"] for row in rows] == [None, None, "", "t"]
    assert [row["keys"] for row in rows] == [None, None, None, "k1 k2"]
