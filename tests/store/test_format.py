"""The record codec against the spec's worked example, an IPv6 record, and arbitrary input."""

from __future__ import annotations

import contextlib
import ipaddress
import struct
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from store.decode import (
    RecordFormatError,
    check_message_and_return_size,
    decode_record,
    find_record_boundary,
)
from store.encode import encode_batch, encode_record
from store.layout import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, cal_msg_length
from store.message import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    MessageExtBrokerInner,
    encode_host,
    offset_msg_id,
)
from store.status import AppendMessageStatus
from tests.store.conftest import make_msg

# The spec's worked example (commitlog-format.md section 3), line by line.
GOLDEN_IPV4 = bytes.fromhex(
    "00 00 00 82 da a3 20 a7 36 10 a6 86 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00"
    "7f 00 00 01 00 00 c3 50 00 00 01 8b cf e5 68 01"
    "7f 00 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 05 68 65 6c 6c 6f 02 54 31"
    "00 20 54 41 47 53 01 54 61 67 41 02 43 4c 55 53"
    "54 45 52 01 44 65 66 61 75 6c 74 43 6c 75 73 74"
    "65 72"
)

MAX = 4 * 1024 * 1024


def _example(**fields: object) -> MessageExtBrokerInner:
    values: dict[str, object] = {"born_timestamp": 1700000000000, "born_host": ("127.0.0.1", 50000)}
    return make_msg(**(values | fields))  # type: ignore[arg-type]


def test_worked_example_is_byte_identical() -> None:
    encoded = encode_record(_example(), 1700000000001, MAX)
    assert not isinstance(encoded, AppendMessageStatus)
    data, timestamp_pos = encoded
    assert len(GOLDEN_IPV4) == 130
    assert data == GOLDEN_IPV4
    assert timestamp_pos == 56
    assert (
        offset_msg_id(encode_host(("127.0.0.1", 10911))[0], 0) == "7F00000100002A9F0000000000000000"
    )


def test_worked_example_fields() -> None:
    rec = decode_record(GOLDEN_IPV4, 0)
    assert (rec.total_size, rec.topic, rec.queue_id, rec.queue_offset) == (130, "T1", 0, 0)
    assert rec.body_crc == 907060870 == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert rec.born_host == ("127.0.0.1", 50000)
    assert rec.store_host == ("127.0.0.1", 10911)
    assert (rec.born_timestamp, rec.store_timestamp) == (1700000000000, 1700000000001)
    assert rec.properties == "TAGS\x01TagA\x02CLUSTER\x01DefaultCluster"
    assert rec.body == b"hello" and rec.crc_ok is True


def test_ipv6_record_field_by_field() -> None:
    msg = _example(born_host=("2001:db8::1", 40000), store_host=("::ffff:10.1.2.3", 10911))
    data, timestamp_pos = encode_record(msg, 1700000000002, MAX)  # type: ignore[misc]
    assert len(data) == cal_msg_length(BORNHOST_V6_FLAG, 5, 2, 32) == 142
    total, magic, crc, qid, flag, qoff, phys, sys_flag = struct.unpack_from(">iiiiiqqi", data)
    assert (total, magic, crc, qid, flag, qoff, phys) == (
        142,
        MESSAGE_MAGIC_CODE,
        907060870,
        0,
        0,
        0,
        0,
    )
    assert sys_flag == BORNHOST_V6_FLAG  # the mapped store host is IPv4
    assert struct.unpack_from(">q", data, 40)[0] == 1700000000000
    assert data[48:64] == bytes.fromhex("20010db8000000000000000000000001")
    assert struct.unpack_from(">i", data, 64)[0] == 40000
    assert timestamp_pos == 68 and struct.unpack_from(">q", data, 68)[0] == 1700000000002
    assert data[76:80] == bytes([10, 1, 2, 3]) and struct.unpack_from(">i", data, 80)[0] == 10911
    assert struct.unpack_from(">iqi", data, 84) == (0, 0, 5)
    rec = decode_record(data, 0)
    assert rec.born_host == ("2001:db8::1", 40000) and rec.store_host == ("10.1.2.3", 10911)


def test_ipv6_store_host_sets_bit_5() -> None:
    data, _ = encode_record(_example(store_host=("::1", 10911)), 1, MAX)  # type: ignore[misc]
    assert struct.unpack_from(">i", data, 36)[0] == STOREHOSTADDRESS_V6_FLAG
    assert len(data) == 142


def test_size_limits() -> None:
    assert (
        encode_record(_example(body=b"x" * 11), 1, 10) is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
    )
    long_props = "k\x01" + "v" * 32766
    assert (
        encode_record(_example(properties=long_props), 1, MAX)
        is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
    )
    assert (
        encode_record(_example(topic="t" * 128), 1, MAX)
        is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
    )


def test_batch_records_are_consecutive() -> None:
    batch = encode_batch([_example(body=b"a"), _example(body=b"bb")], 5, MAX)
    assert not isinstance(batch, AppendMessageStatus)
    assert batch.records == ((0, 56), (126, 182))
    assert batch.topic_queue_key == "T1-0" and batch.msg_num == 2


def test_blank_and_frontier_checks() -> None:
    segment = bytearray(256)
    struct.pack_into(">ii", segment, 100, 156, BLANK_MAGIC_CODE)
    assert check_message_and_return_size(segment, 100, 100, True).size == 0
    assert check_message_and_return_size(segment, 100, 100, True).ok
    assert not check_message_and_return_size(segment, 0, 0, True).ok


def test_crc_mismatch_is_reported() -> None:
    corrupt = bytearray(GOLDEN_IPV4)
    corrupt[88] ^= 1  # first body byte
    assert decode_record(corrupt, 0).crc_ok is False
    assert check_message_and_return_size(corrupt, 0, 0, True).reason == "body CRC mismatch"
    assert check_message_and_return_size(corrupt, 0, 0, False).ok


def test_find_record_boundary_resyncs() -> None:
    buf = bytes(37) + GOLDEN_IPV4.replace(bytes(8), bytes(8))
    # The record claims physical offset 0; placed at 37 it only matches with base -37.
    assert find_record_boundary(buf, 0, -37, len(buf)) == 37
    assert find_record_boundary(buf, 0, 0, len(buf)) is None
    assert find_record_boundary(buf, 38, -37, len(buf)) is None


def _normalised(host: tuple[str, int]) -> tuple[str, int]:
    address = ipaddress.ip_address(host[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address), host[1]


hosts = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str)).flatmap(
    lambda ip: st.tuples(st.just(ip), st.integers(0, 65535))
)


@settings(max_examples=150, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=40),
    queue_id=st.integers(0, 2**31 - 1),
    body=st.binary(max_size=300),
    properties=st.text(max_size=100),
    sys_flag=st.sampled_from([0, 1, 2, 0x8, 0x301]),
    flag=st.integers(-(2**31), 2**31 - 1),
    born=hosts,
    store=hosts,
    timestamps=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)),
    reconsume=st.integers(0, 16),
    prepared=st.integers(0, 2**62),
)
def test_round_trip(  # noqa: PLR0917
    topic: str,
    queue_id: int,
    body: bytes,
    properties: str,
    sys_flag: int,
    flag: int,
    born: tuple[str, int],
    store: tuple[str, int],
    timestamps: tuple[int, int],
    reconsume: int,
    prepared: int,
) -> None:
    msg = MessageExtBrokerInner(
        topic,
        queue_id,
        body,
        properties,
        sys_flag=sys_flag,
        flag=flag,
        born_timestamp=timestamps[0],
        born_host=born,
        store_host=store,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
    )
    encoded = encode_record(msg, timestamps[1], MAX)
    if len(topic.encode()) > 127:
        assert encoded is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
        return
    assert not isinstance(encoded, AppendMessageStatus)
    rec = decode_record(encoded[0], 0)
    assert (rec.topic, rec.queue_id, rec.body, rec.properties, rec.flag) == (
        topic,
        queue_id,
        body,
        properties,
        flag,
    )
    assert rec.sys_flag & 0xF == sys_flag & 0xF and rec.crc_ok
    assert (rec.born_timestamp, rec.store_timestamp) == timestamps
    assert (rec.born_host, rec.store_host) == (_normalised(born), _normalised(store))
    assert (rec.reconsume_times, rec.prepared_transaction_offset) == (reconsume, prepared)
    assert rec.total_size == len(encoded[0])


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), pos=st.integers(0, 40))
def test_arbitrary_bytes_decode_or_raise_our_error(data: bytes, pos: int) -> None:
    with contextlib.suppress(RecordFormatError):
        decode_record(data, pos)
    check_message_and_return_size(data, pos, pos, True)
    find_record_boundary(data, 0, 0, len(data))
