"""The commit-log record layout of RocketMQ 4.9 (`CommitLog.DefaultAppendMessageCallback`,
`CommitLog.calMsgLength`): magic codes, limits, structs and where every field stands.

Owns the layout only: the writer's encoder is `store.encode`, the readers' decoder
`store.decode`. All integers big-endian signed. Layout (IPv4 hosts, b = s = 8; an IPv6 host is
20 bytes and shifts every later field):

    0   TOTALSIZE            int32
    4   MAGICCODE            int32   MESSAGE_MAGIC_CODE
    8   BODYCRC              int32   zlib.crc32(body) & 0x7FFFFFFF
    12  QUEUEID              int32
    16  FLAG                 int32
    20  QUEUEOFFSET          int64   patched by the writer
    28  PHYSICALOFFSET       int64   patched by the writer
    36  SYSFLAG              int32
    40  BORNTIMESTAMP        int64
    48  BORNHOST             b bytes (address + int32 port)
    48+b STORETIMESTAMP      int64   patched by the writer
    56+b STOREHOSTADDRESS    s bytes
    56+b+s RECONSUMETIMES    int32
    60+b+s PREPARED TX OFFSET int64
    68+b+s BODY length int32, body; TOPIC length int8, topic; PROPERTIES length int16, properties

The fixed part, TOTALSIZE to the BODY length, is one struct per host layout (`HEADER_STRUCTS`);
`FIELD_*` name the positions of its fields in the tuple that struct unpacks, and
`HEADER_FIELDS` their names in that order.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from typing import Final

from store.message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG

Buffer = bytes | bytearray | memoryview | mmap.mmap

MESSAGE_MAGIC_CODE: Final = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = -626843477  # 5.x, int16 topic length; recognised, never written
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH: Final = 8
MAX_TOPIC_BYTES: Final = 127
MAX_PROPERTIES_BYTES: Final = 32767
RECORD_OVERHEAD_BYTES: Final = 64 * 1024  # a record may exceed max_message_size by this much

MAGIC_BYTES: Final = struct.pack(">i", MESSAGE_MAGIC_CODE)
BLANK_RECORD_HEADER: Final = struct.Struct(">ii")  # TOTALSIZE, BLANK_MAGIC_CODE
SIZE_MAGIC: Final = struct.Struct(">ii")
INT32: Final = struct.Struct(">i")
INT64: Final = struct.Struct(">q")
QUEUE_AND_PHYSICAL_OFFSET: Final = struct.Struct(">qq")

# Byte positions in a record (those after BORNHOST depend on the host sizes).
TOTALSIZE_POS: Final = 0
MAGIC_POS: Final = 4
BODYCRC_POS: Final = 8
QUEUEID_POS: Final = 12
FLAG_POS: Final = 16
QUEUEOFFSET_POS: Final = 20
PHYSICALOFFSET_POS: Final = 28
SYSFLAG_POS: Final = 36
BORNTIMESTAMP_POS: Final = 40
BORNHOST_POS: Final = 48
IPV4_HOST_SIZE: Final = 8
IPV6_HOST_SIZE: Final = 20

# The header struct's fields in order: (name, struct code); a host's code depends on its size.
_HOST: Final = "host"
_HEADER_LAYOUT: Final = (
    ("total_size", "i"),
    ("magic", "i"),
    ("body_crc", "i"),
    ("queue_id", "i"),
    ("flag", "i"),
    ("queue_offset", "q"),
    ("physical_offset", "q"),
    ("sys_flag", "i"),
    ("born_timestamp", "q"),
    ("born_host", _HOST),
    ("store_timestamp", "q"),
    ("store_host", _HOST),
    ("reconsume_times", "i"),
    ("prepared_transaction_offset", "q"),
    ("body_length", "i"),
)
HEADER_FIELDS: Final = tuple(name for name, _ in _HEADER_LAYOUT)

# Positions in the tuple a header struct unpacks (plain ints: indexing by them costs nothing).
FIELD_TOTAL_SIZE: Final = HEADER_FIELDS.index("total_size")
FIELD_MAGIC: Final = HEADER_FIELDS.index("magic")
FIELD_BODY_CRC: Final = HEADER_FIELDS.index("body_crc")
FIELD_QUEUE_ID: Final = HEADER_FIELDS.index("queue_id")
FIELD_FLAG: Final = HEADER_FIELDS.index("flag")
FIELD_QUEUE_OFFSET: Final = HEADER_FIELDS.index("queue_offset")
FIELD_PHYSICAL_OFFSET: Final = HEADER_FIELDS.index("physical_offset")
FIELD_SYS_FLAG: Final = HEADER_FIELDS.index("sys_flag")
FIELD_BORN_TIMESTAMP: Final = HEADER_FIELDS.index("born_timestamp")
FIELD_BORN_HOST: Final = HEADER_FIELDS.index("born_host")
FIELD_STORE_TIMESTAMP: Final = HEADER_FIELDS.index("store_timestamp")
FIELD_STORE_HOST: Final = HEADER_FIELDS.index("store_host")
FIELD_RECONSUME_TIMES: Final = HEADER_FIELDS.index("reconsume_times")
FIELD_PREPARED_TRANSACTION_OFFSET: Final = HEADER_FIELDS.index("prepared_transaction_offset")
FIELD_BODY_LENGTH: Final = HEADER_FIELDS.index("body_length")


def _header_struct(born_size: int, store_size: int) -> struct.Struct:
    sizes = {"born_host": born_size, "store_host": store_size}
    codes = (f"{sizes[name]}s" if code == _HOST else code for name, code in _HEADER_LAYOUT)
    return struct.Struct(">" + "".join(codes))


# Keyed by (born host is IPv6, store host is IPv6).
HEADER_STRUCTS: Final = {
    (b6, s6): _header_struct(
        IPV6_HOST_SIZE if b6 else IPV4_HOST_SIZE, IPV6_HOST_SIZE if s6 else IPV4_HOST_SIZE
    )
    for b6 in (False, True)
    for s6 in (False, True)
}
HEADER_V4: Final = HEADER_STRUCTS[(False, False)]
assert HEADER_V4.size == 88  # 68 + b + s, then the int32 body length (b = s = 8)
assert HEADER_V4.format == ">iiiiiqqiq8sq8siqi"
assert struct.calcsize(">iiiiiqq") == SYSFLAG_POS


def host_sizes(sys_flag: int) -> tuple[int, int]:
    """(born host size, store host size) selected by sysFlag bits 4 and 5."""
    born = IPV6_HOST_SIZE if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_SIZE
    store = IPV6_HOST_SIZE if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_SIZE
    return born, store


def store_timestamp_pos(sys_flag: int) -> int:
    return BORNHOST_POS + host_sizes(sys_flag)[0]


def cal_msg_length(
    sys_flag: int, body_length: int, topic_length: int, properties_length: int
) -> int:
    """RocketMQ `calMsgLength`: 75 + b + s + B + T + P (91 + B + T + P for IPv4 hosts)."""
    born, store = host_sizes(sys_flag)
    return 75 + born + store + max(body_length, 0) + topic_length + max(properties_length, 0)


MIN_RECORD_SIZE: Final = cal_msg_length(0, 0, 0, 0)  # empty body, topic and properties


def body_crc(body: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF
