"""REGISTER_BROKER's body in both of 4.9's encodings, its CRC and its headers.

The golden bytes are written out from `RegisterBrokerBody.java` and `TopicConfig.encode`: the
uncompressed form is fastjson's text of the bean (fields alphabetical), the compressed one a
zlib stream of length-prefixed parts. A decoder that read a length as little-endian, skipped
the filter list, took the map key instead of `topicName`, or let a stream inflate without
bound would fail here.
"""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from protocol.namesrv_headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    crc32_of,
)
from protocol.register_broker import (
    RegisterBrokerBody,
    decode_data_version,
    register_broker_request,
)

LIMITS = {"max_topics": 1000, "max_inflated": 1 << 20}
VERSION = DataVersion(2, 1700000000123)
TOPIC_A = TopicConfigData("TopicA", 8, 8, 6)
GOLDEN_JSON = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":2,'
    b'"timestamp":1700000000123},"topicConfigTable":{"TopicA":{"order":false,"perm":6,'
    b'"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"TopicA","topicSysFlag":0,'
    b'"writeQueueNums":8}}}}'
)
GOLDEN_INFLATED = (
    b"\x00\x00\x00\x27"
    b'{"counter":2,"timestamp":1700000000123}'
    b"\x00\x00\x00\x01"
    b"\x00\x00\x00\x17"
    b"TopicA 8 8 6 SINGLE_TAG"
    b"\x00\x00\x00\x02"
    b"[]"
)


def test_uncompressed_body_is_fastjsons_text_byte_for_byte() -> None:
    body = RegisterBrokerBody((TOPIC_A,), VERSION)
    assert body.encode(compressed=False) == GOLDEN_JSON
    assert RegisterBrokerBody.decode(GOLDEN_JSON, False, **LIMITS) == body


def test_compressed_body_inflates_to_the_length_prefixed_parts() -> None:
    body = RegisterBrokerBody((TOPIC_A,), VERSION)
    assert zlib.decompress(body.encode(compressed=True)) == GOLDEN_INFLATED
    decoded = RegisterBrokerBody.decode(zlib.compress(GOLDEN_INFLATED, 9), True, **LIMITS)
    assert decoded == body


def test_compressed_form_drops_sys_flag_and_order_as_topicconfig_encode_does() -> None:
    topic = TopicConfigData("%RETRY%g", 1, 1, 6, "SINGLE_TAG", topic_sys_flag=3, order=True)
    raw = RegisterBrokerBody((topic,), VERSION).encode(compressed=True)
    (decoded,) = RegisterBrokerBody.decode(raw, True, **LIMITS).topics
    assert decoded == TopicConfigData("%RETRY%g", 1, 1, 6)


def test_uncompressed_topic_name_comes_from_the_value_not_the_key() -> None:
    text = GOLDEN_JSON.replace(b'"topicConfigTable":{"TopicA"', b'"topicConfigTable":{"other"')
    (topic,) = RegisterBrokerBody.decode(text, False, **LIMITS).topics
    assert topic.topic_name == "TopicA"


def test_filter_servers_survive_both_forms() -> None:
    body = RegisterBrokerBody((TOPIC_A,), VERSION, ("10.0.0.1:1",))
    for compressed in (False, True):
        raw = body.encode(compressed)
        assert RegisterBrokerBody.decode(raw, compressed, **LIMITS) == body


def test_crc32_is_utilall_crc32_with_the_top_bit_cleared() -> None:
    assert crc32_of(b"abc") == 0x352441C2  # CRC-32 of "abc", top bit clear already
    assert crc32_of(b"The quick brown fox jumps over the lazy dog") == 0x414FA339
    assert crc32_of(b"a") == 0xE8B7BE43 & 0x7FFFFFFF
    assert crc32_of(None) == crc32_of(b"") == 0


def test_register_header_wire_names() -> None:
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912",
        "brokerId": "0",
        "compressed": "true",
        "bodyCrc32": "12345",
    }
    header = RegisterBrokerRequestHeader.from_ext_fields(fields)
    assert header.compressed and header.body_crc32 == 12345 and header.broker_id == 0
    assert header.to_ext_fields() == fields
    assert RegisterBrokerResponseHeader("h:1", "m:2").to_ext_fields() == {
        "haServerAddr": "h:1",
        "masterAddr": "m:2",
    }
    with pytest.raises(HeaderFieldError, match="brokerAddr: the broker address is blank"):
        RegisterBrokerRequestHeader.from_ext_fields({**fields, "brokerAddr": " "}).checked()
    with pytest.raises(HeaderFieldError, match="HA address is longer than 255"):
        RegisterBrokerRequestHeader.from_ext_fields({**fields, "haServerAddr": "h" * 256}).checked()
    with pytest.raises(HeaderFieldError, match="the custom field haServerAddr is null"):
        RegisterBrokerRequestHeader.from_ext_fields(
            {k: v for k, v in fields.items() if k != "haServerAddr"}
        )


def test_register_request_carries_the_crc_of_the_bytes_it_sends() -> None:
    body = RegisterBrokerBody((TOPIC_A,), VERSION)
    for compressed in (False, True):
        request = register_broker_request(
            "C",
            "127.0.0.1:10911",
            "broker-a",
            1,
            "127.0.0.1:10912",
            body,
            compressed=compressed,
            opaque=7,
        )
        assert (request.code, request.opaque, request.is_response) == (103, 7, False)
        assert request.body == body.encode(compressed)
        assert request.ext_fields == {
            "brokerName": "broker-a",
            "brokerAddr": "127.0.0.1:10911",
            "clusterName": "C",
            "haServerAddr": "127.0.0.1:10912",
            "brokerId": "1",
            "compressed": "true" if compressed else "false",
            "bodyCrc32": str(zlib.crc32(request.body) & 0x7FFFFFFF),
        }


def _compressed(*parts: bytes) -> bytes:
    return zlib.compress(b"".join(parts), 9)


def _part(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


VERSION_PART = _part(b'{"counter":2,"timestamp":1}')
ONE = b"\x00\x00\x00\x01"


@pytest.mark.parametrize(
    ("raw", "compressed", "problem"),
    [
        (b"not json", False, "not valid JSON"),
        (GOLDEN_JSON.replace(b'"perm":6', b'"perm":"x"'), False, "perm"),
        (GOLDEN_JSON.replace(b'"TopicA","topicSys', b'"Topic A","topicSys'), False, "Topic A"),
        (b"\x78\x9c garbage", True, "does not inflate"),
        (zlib.compress(GOLDEN_INFLATED)[:-6], True, "truncated"),
        (_compressed(b"\x00\x00"), True, "ends before"),
        (_compressed(b"\x7f\xff\xff\xff"), True, "does not fit"),
        (_compressed(VERSION_PART, b"\xff\xff\xff\xff"), True, "negative"),
        (_compressed(VERSION_PART, b"\x00\x00\x00\x01", _part(b"T 1 1 6")), True, "5 fields"),
        (_compressed(VERSION_PART, b"\x00\x00\x00\x01", _part(b"T 1 x 6 SINGLE_TAG")), True, "int"),
        (_compressed(VERSION_PART, b"\x00\x00\x00\x01", _part(b"T 1 1 6 NOPE")), True, "filter"),
        (_compressed(VERSION_PART, b"\x00\x00\x00\x00", _part(b"{}")), True, "filterServerList"),
        (_compressed(VERSION_PART, b"\x00\x00\x00\x00", _part(b"[]"), b"x"), True, "follow"),
        (
            _compressed(VERSION_PART, b"\x00\x00\x00\x01", _part(b"T -1 1 6 SINGLE_TAG")),
            True,
            "neg",
        ),
    ],
)
def test_bad_bodies_are_refused_with_a_remark_naming_the_part(
    raw: bytes, compressed: bool, problem: str
) -> None:
    with pytest.raises(HeaderFieldError, match=problem) as caught:
        RegisterBrokerBody.decode(raw, compressed, **LIMITS)
    assert caught.value.response_code == ResponseCode.SYSTEM_ERROR


def test_bounds_are_the_callers_not_the_peers() -> None:
    many = RegisterBrokerBody(tuple(TopicConfigData(f"T{i}", 1, 1, 6) for i in range(11)), VERSION)
    for compressed in (False, True):
        with pytest.raises(HeaderFieldError, match="11 topics are more than the limit of 10"):
            RegisterBrokerBody.decode(
                many.encode(compressed), compressed, max_topics=10, max_inflated=1 << 20
            )
    bomb = zlib.compress(b"\x00" * (1 << 20), 9)  # 1 KiB that inflates to 1 MiB
    with pytest.raises(HeaderFieldError, match="inflates beyond 65536 bytes"):
        RegisterBrokerBody.decode(bomb, True, max_topics=10, max_inflated=1 << 16)
    with pytest.raises(HeaderFieldError, match="over the limit of 100"):
        RegisterBrokerBody.decode(GOLDEN_JSON, False, max_topics=10, max_inflated=100)


def test_filter_servers_are_bounded() -> None:
    many = RegisterBrokerBody((), VERSION, tuple(f"h:{i}" for i in range(65)))
    for compressed in (False, True):
        with pytest.raises(HeaderFieldError, match="65 filter servers are more than 64"):
            RegisterBrokerBody.decode(many.encode(compressed), compressed, **LIMITS)
    long = RegisterBrokerBody((), VERSION, ("h" * 256,))
    with pytest.raises(HeaderFieldError, match="filter server address is longer than 255"):
        RegisterBrokerBody.decode(long.encode(), False, **LIMITS)


def test_data_version_body() -> None:
    assert decode_data_version(b'{"counter":5,"timestamp":7}') == DataVersion(5, 7)
    assert decode_data_version(None) == DataVersion(0, 0)
    with pytest.raises(HeaderFieldError):
        decode_data_version(b'{"counter":"x"}')


_names = st.text(alphabet="abcXYZ019%|_-", min_size=1, max_size=20)
_topics = st.builds(
    TopicConfigData,
    _names,
    st.integers(0, 1 << 16),
    st.integers(0, 1 << 16),
    st.integers(0, 7),
    st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]),
)


@given(
    st.lists(_topics, max_size=8, unique_by=lambda t: t.topic_name),
    st.integers(0, 1 << 62),
    st.integers(0, 1 << 62),
    st.booleans(),
)
def test_round_trip(topics: list[TopicConfigData], counter: int, ts: int, compressed: bool) -> None:
    body = RegisterBrokerBody(tuple(topics), DataVersion(counter, ts))
    decoded = RegisterBrokerBody.decode(body.encode(compressed), compressed, **LIMITS)
    assert decoded.data_version == body.data_version
    by_name = {t.topic_name: t for t in decoded.topics}  # a map: the order is not kept
    assert len(by_name) == len(decoded.topics)
    assert by_name == {t.topic_name: t for t in body.topics}


@given(st.binary(max_size=512), st.booleans())
def test_arbitrary_bytes_decode_or_raise_our_error(data: bytes, compressed: bool) -> None:
    with contextlib.suppress(HeaderFieldError):
        RegisterBrokerBody.decode(data, compressed, **LIMITS)


@given(st.binary(max_size=512))
def test_arbitrary_inflated_streams_decode_or_raise_our_error(data: bytes) -> None:
    with contextlib.suppress(HeaderFieldError):
        RegisterBrokerBody.decode(zlib.compress(data), True, **LIMITS)
