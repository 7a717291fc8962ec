"""The row shape of the `commitlog` source: one row per stored message.

Owns the column list, the Spark `StructType` and the Arrow schema that `read()` must yield.
Knows nothing of the byte layout (that is `store.layout`) or of how rows are decoded.

Timestamps are the record's millisecond values as UTC timestamps. `body` holds the bytes as
stored: a compressed message (sysFlag bit 0) keeps its compressed body, and `body_crc` is the
CRC of those bytes. `crc_ok` is null when CRC verification is off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# Arrow type per column, in row order. Spark's to_arrow_schema(schema, timezone="UTC") must give
# exactly this schema (checked by a test), or Spark rejects the batches.
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
ARROW_COLUMNS: Final[tuple[tuple[str, pa.DataType], ...]] = (
    ("physical_offset", pa.int64()),
    ("size", pa.int32()),
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("flag", pa.int32()),
    ("sys_flag", pa.int32()),
    ("born_timestamp", _TIMESTAMP),
    ("born_host", pa.string()),
    ("store_timestamp", _TIMESTAMP),
    ("store_host", pa.string()),
    ("reconsume_times", pa.int32()),
    ("prepared_transaction_offset", pa.int64()),
    ("body_crc", pa.int32()),
    ("crc_ok", pa.bool_()),
    ("properties", pa.string()),
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("msg_id", pa.string()),
    ("body", pa.binary()),
)
COLUMN_NAMES: Final = tuple(name for name, _ in ARROW_COLUMNS)
ARROW_SCHEMA: Final = pa.schema([pa.field(name, kind) for name, kind in ARROW_COLUMNS])


def spark_schema() -> StructType:
    """The Spark schema of the source, built in Python (a DDL string would need a live JVM)."""
    from pyspark.sql.types import (
        BinaryType,
        BooleanType,
        DataType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    spark_types: dict[pa.DataType, DataType] = {
        pa.int64(): LongType(),
        pa.int32(): IntegerType(),
        pa.string(): StringType(),
        pa.bool_(): BooleanType(),
        pa.binary(): BinaryType(),
        _TIMESTAMP: TimestampType(),
    }
    return StructType(
        [StructField(name, spark_types[kind], nullable=True) for name, kind in ARROW_COLUMNS]
    )
