"""Split planning without Spark: a split starts only where a record really starts, even when a
message body holds a record image (what a producer can send) with a matching offset field."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import trio

from pipeline import columnar, splits
from pipeline.schema import ARROW_SCHEMA
from pipeline.source import snap_to_record
from store import encode, layout
from store.message_store import DefaultMessageStore
from tests.pipeline import stores

OPTIONS = columnar.DecodeOptions(
    include_body=False, verify_crc=True, fail_on_crc_error=False, topics=None
)


async def _write_with_forged_image(root: str) -> tuple[int, list[stores.Put]]:
    """Records, then one whose body is a whole record image claiming the body's own offset."""
    async with DefaultMessageStore.open(stores.config(root)) as store:
        puts = await stores.put_all(store, [stores.message(i) for i in range(3)])
        landing = store.max_offset + layout.HEADER_V4.size
        encoded = encode.encode_record(stores.message(7, topic="forged"), 0, 1 << 20)
        assert isinstance(encoded, tuple)
        image = bytearray(encoded[0])
        layout.INT64.pack_into(image, layout.PHYSICALOFFSET_POS, landing)
        carrier = stores.message(50)
        carrier.body = bytes(image)
        puts += await stores.put_all(store, [carrier, stores.message(51)])
    assert puts[3].offset + layout.HEADER_V4.size == landing
    return landing, puts


def offsets_read(bounds: splits.StoreBounds, root: str, start: int, split_bytes: int) -> list[int]:
    planned = splits.plan(bounds, root, start, bounds.durable_offset, split_bytes)
    batches = [batch for split in planned for batch in splits.read_split(split, OPTIONS)]
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    return sorted(table.column("physical_offset").to_pylist())


def test_a_record_image_inside_a_body_never_becomes_a_row(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path / "store")
    landing, puts = trio.run(_write_with_forged_image, root)
    expected = sorted(put.offset for put in puts)
    bounds = splits.store_bounds(root)
    base = bounds.min_offset
    assert offsets_read(bounds, root, base, bounds.segment_size) == expected
    for cut in (landing - 5, landing, landing + 1):  # split boundaries inside the carrier
        assert offsets_read(bounds, root, base, cut - base) == expected, cut
    after_carrier = expected[4]
    for inside in (landing - 5, landing):  # startingOffsets inside the carrier
        assert snap_to_record(root, inside, bounds) == after_carrier
