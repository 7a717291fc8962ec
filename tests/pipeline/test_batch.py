"""Batch reads through Spark: every field, splits, offset ranges, topics, CRC, durability."""

from __future__ import annotations

import pathlib
import shutil
from typing import TYPE_CHECKING, Any

import pytest
import trio

from pipeline import columnar
from store import layout
from store.message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, encode_host, offset_msg_id
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from tests.pipeline import stores

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COUNT = 400


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[stores.Put]]:
    root = str(tmp_path_factory.mktemp("mixed") / "store")
    return root, stores.write_mixed_sync(root, COUNT)


def rows(df: DataFrame) -> list[dict[str, Any]]:
    return sorted(df.toArrow().to_pylist(), key=lambda row: row["physical_offset"])


def load(spark: SparkSession, root: str, **options: str) -> DataFrame:
    return spark.read.format("commitlog").options(**options).load(root)


def host_text(host: tuple[str, int]) -> str:
    return columnar.format_host(encode_host(host)[0])


def test_every_field_equals_what_was_put(
    spark: SparkSession, mixed: tuple[str, list[stores.Put]]
) -> None:
    root, puts = mixed
    got = rows(load(spark, root))
    assert len(got) == len(puts) == len({row["physical_offset"] for row in got})
    with CommitLogReader(root) as reader:
        queue_offsets = {r.physical_offset: r.queue_offset for r in reader.iter_records(0)}
    for row, put in zip(got, sorted(puts, key=lambda p: p.offset), strict=True):
        msg = put.msg
        assert row["physical_offset"] == put.offset
        assert (row["topic"], row["queue_id"], row["body"]) == (msg.topic, msg.queue_id, msg.body)
        assert (row["properties"], row["flag"]) == (msg.properties_string, msg.flag)
        assert row["sys_flag"] & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) == msg.sys_flag
        assert int(row["born_timestamp"].timestamp() * 1000) == msg.born_timestamp
        assert (row["born_host"], row["store_host"]) == (
            host_text(msg.born_host),
            host_text(msg.store_host),
        )
        assert row["reconsume_times"] == msg.reconsume_times
        assert row["prepared_transaction_offset"] == msg.prepared_transaction_offset
        assert row["crc_ok"] is True and row["body_crc"] == layout.body_crc(msg.body)
        assert row["tags"] == stores.property_value(msg.properties_string, "TAGS")
        assert row["keys"] == stores.property_value(msg.properties_string, "KEYS")
        assert row["msg_id"] == offset_msg_id(encode_host(msg.store_host)[0], put.offset)
        assert row["queue_offset"] == queue_offsets[put.offset]
    assert {row["store_host"] for row in got if row["topic"] == "special"} >= {"[::1]:10911"}


def test_split_sizes_that_cut_records_give_identical_results(
    spark: SparkSession, mixed: tuple[str, list[stores.Put]]
) -> None:
    root, _ = mixed
    whole = load(spark, root, includeBody="false").toArrow().sort_by("physical_offset")
    for split_bytes in ("7777", "30011"):
        df = load(spark, root, includeBody="false", splitBytes=split_bytes)
        assert df.toArrow().sort_by("physical_offset").equals(whole), split_bytes
    assert whole.num_rows == COUNT + 10 + 2 + 4


def test_offset_ranges_and_topics_select_exactly(
    spark: SparkSession, mixed: tuple[str, list[stores.Put]]
) -> None:
    root, puts = mixed
    offsets = sorted(put.offset for put in puts)
    start, end = offsets[50], offsets[300]
    got = load(spark, root, startingOffsets=str(start), endingOffsets=str(end), includeBody="false")
    assert [row["physical_offset"] for row in rows(got)] == offsets[50:300]
    inside = load(spark, root, startingOffsets=str(start + 1), endingOffsets=str(end + 1))
    assert [row["physical_offset"] for row in rows(inside)] == offsets[51:301]
    picked = rows(load(spark, root, topics="batch,special", splitBytes="5000"))
    expected = sorted(p.offset for p in puts if p.msg.topic in ("batch", "special"))
    assert [row["physical_offset"] for row in picked] == expected


def test_bad_option_fails_naming_it(
    spark: SparkSession, mixed: tuple[str, list[stores.Put]]
) -> None:
    root, _ = mixed
    with pytest.raises(Exception, match="startingOffset") as caught:
        load(spark, root, startingOffset="0").count()
    assert "unknown option" in str(caught.value)
    with pytest.raises(Exception, match="splitBytes"):
        load(spark, root, splitBytes="-5").count()
    with pytest.raises(Exception, match="not a store directory"):
        load(spark, root + "/commitlog").count()


def test_flipped_body_byte_gives_one_crc_failure(
    spark: SparkSession, mixed: tuple[str, list[stores.Put]], tmp_path: pathlib.Path
) -> None:
    root, puts = mixed
    copy = str(tmp_path / "store")
    shutil.copytree(root, copy)
    victim = next(p for p in sorted(puts, key=lambda p: p.offset)[100:] if len(p.msg.body) > 10)
    segment_base = victim.offset - victim.offset % stores.SEGMENT_BYTES
    path = pathlib.Path(copy, "commitlog", f"{segment_base:020d}")
    data = bytearray(path.read_bytes())
    data[victim.offset - segment_base + layout.HEADER_V4.size + 3] ^= 0x01
    path.write_bytes(bytes(data))
    got = rows(load(spark, copy, includeBody="false"))
    assert [row["physical_offset"] for row in got if not row["crc_ok"]] == [victim.offset]
    with pytest.raises(Exception, match="CRC"):
        load(spark, copy, failOnCrcError="true").count()
    # A read or a split that starts inside the record before it resyncs onto the damaged one.
    before = max(p.offset for p in puts if p.offset < victim.offset)
    inside = load(spark, copy, startingOffsets=str(before + 1), includeBody="false")
    assert [r["physical_offset"] for r in rows(inside) if not r["crc_ok"]] == [victim.offset]
    with pytest.raises(Exception, match="CRC"):
        load(spark, copy, startingOffsets=str(before + 1), failOnCrcError="true").count()


def test_unflushed_records_appear_only_once_flushed(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    root = str(tmp_path / "store")
    first = stores.append_sync(root, [stores.message(i) for i in range(20)])
    lazy = stores.config(
        root,
        flush_interval_commit_log_ms=600_000,
        flush_commit_log_least_pages=10_000,
        flush_commit_log_thorough_interval_ms=600_000,
    )

    async def put_then_read() -> tuple[int, int, int]:
        async with DefaultMessageStore.open(lazy) as store:
            await stores.put_all(store, [stores.message(i) for i in range(20, 25)])
            with CommitLogReader(root) as reader:
                assert reader.durable_offset() < store.max_offset
            return load(spark, root).count(), store.max_offset, len(first)

    seen_before, written, flushed = trio.run(put_then_read)
    assert seen_before == flushed == 20
    with CommitLogReader(root) as reader:
        assert reader.durable_offset() == written
    assert load(spark, root).count() == 25


def test_empty_ranges_give_an_empty_frame_with_the_schema(
    spark: SparkSession, mixed: tuple[str, list[stores.Put]], tmp_path: pathlib.Path
) -> None:
    root, puts = mixed
    first = min(put.offset for put in puts)
    new_store = str(tmp_path / "new")
    stores.append_sync(new_store, [])
    for df in (
        load(spark, root, startingOffsets="latest"),
        load(spark, root, startingOffsets=str(first + 1), endingOffsets=str(first + 1)),
        load(spark, new_store),
    ):
        assert rows(df) == []
        assert df.schema == load(spark, root).schema
