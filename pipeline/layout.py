"""The record layout as the columnar decoder needs it, derived from `store.format`.

Owns nothing of the layout itself: every position, size and magic code here is read from
`store.format` / `store.message` (one definition of the format), and turned into the shapes a
vectorised decoder wants: a numpy structured dtype of the fixed IPv4 header, and a row decoder for
the records the fast path leaves to the store's own `decode_record` (IPv6 hosts).
"""

from __future__ import annotations

import re
import struct
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from store import format as record_format
from store.message import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    decode_host,
    encode_host,
    offset_msg_id,
)

if TYPE_CHECKING:
    from pipeline.columnar import DecodeOptions

PREFIX: Final = record_format.SIZE_MAGIC  # TOTALSIZE, MAGICCODE: enough to hop or stop
MESSAGE_MAGIC_CODE: Final = record_format.MESSAGE_MAGIC_CODE
BLANK_MAGIC_CODE: Final = record_format.BLANK_MAGIC_CODE
MIN_RECORD_SIZE: Final = record_format.cal_msg_length(0, 0, 0, 0)
SYS_FLAG_POS: Final = record_format.SYSFLAG_POS
V6_HOST_FLAGS: Final = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
BODY_POS: Final = record_format.HEADER_V4.size  # body bytes follow the int32 body length
body_crc: Final = record_format.body_crc

# Field names of the store's fixed header struct, in its order (see store/format.py).
HEADER_FIELDS: Final = (
    "total_size",
    "magic",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "physical_offset",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_offset",
    "body_len",
)


def _numpy_dtype(header: struct.Struct) -> np.dtype[Any]:
    """A big-endian numpy record dtype with the same fields and offsets as a struct format."""
    codes = re.findall(r"(\d*)([a-z])", header.format.lstrip(">"))
    assert len(codes) == len(HEADER_FIELDS), header.format
    formats: list[Any] = []
    offsets: list[int] = []
    prefix = ">"
    for count, code in codes:
        offsets.append(struct.calcsize(prefix))
        prefix += count + code
        formats.append({"i": ">i4", "q": ">i8"}.get(code) or ("u1", (int(count),)))
    return np.dtype(
        {"names": HEADER_FIELDS, "formats": formats, "offsets": offsets, "itemsize": header.size}
    )


FIXED: Final = _numpy_dtype(record_format.HEADER_V4)
assert FIXED.fields is not None and FIXED.fields["sys_flag"][1] == SYS_FLAG_POS


def format_host(raw: bytes) -> str:
    """`a.b.c.d:port` or `[v6 address]:port` of an encoded host field."""
    address, port = decode_host(raw)
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def property_value(properties: str, name: str) -> str | None:
    """The first value of `name` in a raw properties string (`k\\x01v\\x02...`), or None."""
    for pair in properties.split("\x02"):
        key, sep, value = pair.partition("\x01")
        if sep and key == name:
            return value
    return None


def decode_row(data: Any, pos: int, base: int, options: DecodeOptions) -> dict[str, Any]:
    """One record through the store's decoder, as a row of the source schema."""
    rec = record_format.decode_record(
        data,
        pos,
        base_offset=base,
        include_body=options.include_body,
        verify_crc=options.verify_crc,
    )
    store_raw = encode_host(rec.store_host)[0]
    return {
        "physical_offset": rec.physical_offset,
        "size": rec.total_size,
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "flag": rec.flag,
        "sys_flag": rec.sys_flag,
        "born_timestamp": rec.born_timestamp * 1000,
        "born_host": format_host(encode_host(rec.born_host)[0]),
        "store_timestamp": rec.store_timestamp * 1000,
        "store_host": format_host(store_raw),
        "reconsume_times": rec.reconsume_times,
        "prepared_transaction_offset": rec.prepared_transaction_offset,
        "body_crc": rec.body_crc,
        "crc_ok": rec.crc_ok,
        "properties": rec.properties,
        "tags": property_value(rec.properties, "TAGS"),
        "keys": property_value(rec.properties, "KEYS"),
        "msg_id": offset_msg_id(store_raw, rec.physical_offset),
        "body": rec.body,
    }
