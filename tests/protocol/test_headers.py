"""Typed headers: round trips, Java-style integer parsing, booleans, and field errors."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codes import RequestCode, ResponseCode
from protocol.consumer_headers import wire_fields
from protocol.errors import HeaderFieldError
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_send_header,
)
from tests.protocol.strategies import int32, int64, texts

opt = st.none
send_v1 = st.builds(
    SendMessageRequestHeader,
    producer_group=texts,
    topic=texts,
    default_topic=texts,
    default_topic_queue_nums=int32,
    queue_id=int32,
    sys_flag=int32,
    born_timestamp=int64,
    flag=int32,
    properties=opt() | texts,
    reconsume_times=opt() | int32,
    unit_mode=st.booleans(),
    max_reconsume_times=opt() | int32,
    batch=st.booleans(),
    bname=opt() | texts,
)
V2_SAMPLE = {
    "a": "group",
    "b": "TopicTest",
    "c": "TBW102",
    "d": "4",
    "e": "3",
    "f": "0",
    "g": "1795332302031",
    "h": "0",
}
V1_SAMPLE = {
    "producerGroup": "group",
    "topic": "TopicTest",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "3",
    "sysFlag": "0",
    "bornTimestamp": "1795332302031",
    "flag": "0",
}
OTHER_HEADERS: list[type[Any]] = [
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
    ConsumerSendMsgBackRequestHeader,
    GetRouteInfoRequestHeader,
    UnregisterClientRequestHeader,
]
_KIND_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "str": texts,
    "group": st.from_regex(r"[%|a-zA-Z0-9_-]{1,255}", fullmatch=True),
    "client_id": st.from_regex(r"[^\x00-\x1f\x7f\s][^\x00-\x1f\x7f]{0,254}", fullmatch=True),
    "int": int32,
    "long": int64,
    "bool": st.booleans(),
}


def header_strategy(cls: type[Any]) -> st.SearchStrategy[Any]:
    defaults = {f.name: f.default for f in fields(cls)}
    kwargs = {}
    for attribute, _wire, kind, required in wire_fields(cls):
        strategy = _KIND_STRATEGIES[kind]
        nullable = not required and defaults[attribute] is None
        kwargs[attribute] = st.none() | strategy if nullable else strategy
    return st.builds(cls, **kwargs)


@given(send_v1)
@settings(max_examples=100)
def test_send_v1_round_trip(header: SendMessageRequestHeader) -> None:
    ext = header.to_ext_fields()
    assert all(isinstance(v, str) for v in ext.values())
    assert SendMessageRequestHeader.from_ext_fields(ext) == header
    assert decode_send_header(RequestCode.SEND_MESSAGE, ext) == header


@given(send_v1)
@settings(max_examples=100)
def test_send_v2_round_trip_and_conversion(header: SendMessageRequestHeader) -> None:
    v2 = SendMessageRequestHeaderV2.from_v1(header)
    ext = v2.to_ext_fields()
    assert set(ext) <= set("abcdefghijklmn")
    assert SendMessageRequestHeaderV2.from_ext_fields(ext) == v2
    assert v2.to_v1() == header
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        assert decode_send_header(code, ext) == header


@pytest.mark.parametrize("cls", OTHER_HEADERS, ids=lambda c: c.__name__)
def test_other_headers_round_trip(cls: type[Any]) -> None:
    @given(header_strategy(cls))
    @settings(max_examples=25)
    def check(header: Any) -> None:
        assert cls.from_ext_fields(header.to_ext_fields()) == header

    check()


@pytest.mark.parametrize("cls", OTHER_HEADERS, ids=lambda c: c.__name__)
def test_other_headers_name_each_missing_required_field(cls: type[Any]) -> None:
    values = {"str": "x", "int": "1", "long": "2", "bool": "true", "group": "g", "client_id": "c@1"}
    full = {wire: values[kind] for _a, wire, kind, _r in wire_fields(cls)}
    cls.from_ext_fields(full)
    for _attribute, wire, _kind, required in wire_fields(cls):
        partial = {k: v for k, v in full.items() if k != wire}
        if required:
            with pytest.raises(HeaderFieldError, match=f"the custom field {wire} is null"):
                cls.from_ext_fields(partial)
        else:
            cls.from_ext_fields(partial)


def test_v2_letters_map_to_v1_fields() -> None:
    ext = {**V2_SAMPLE, "i": "TAGS\x01a", "j": "2", "k": "true", "l": "16", "m": "true", "n": "b"}
    assert decode_send_header(RequestCode.SEND_MESSAGE_V2, ext) == SendMessageRequestHeader(
        producer_group="group",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1795332302031,
        flag=0,
        properties="TAGS\x01a",
        reconsume_times=2,
        unit_mode=True,
        max_reconsume_times=16,
        batch=True,
        bname="b",
    )


def test_code_10_reads_v1_names_only() -> None:
    assert decode_send_header(RequestCode.SEND_MESSAGE, V1_SAMPLE).queue_id == 3
    with pytest.raises(HeaderFieldError, match="the custom field producerGroup is null"):
        decode_send_header(RequestCode.SEND_MESSAGE, V2_SAMPLE)


@pytest.mark.parametrize("letter", list("abcdefgh"))
def test_v2_missing_required_letter(letter: str) -> None:
    ext = {k: v for k, v in V2_SAMPLE.items() if k != letter}
    with pytest.raises(HeaderFieldError) as info:
        decode_send_header(RequestCode.SEND_MESSAGE_V2, ext)
    assert info.value.field == letter
    assert str(info.value) == f"the custom field {letter} is null"
    assert info.value.response_code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("e", "+7", 7),
        ("e", "-1", -1),
        ("e", "0000000000003", 3),
        ("e", "2147483647", 2147483647),
        ("e", "-2147483648", -2147483648),
        ("g", "9223372036854775807", 9223372036854775807),
        ("g", "-9223372036854775808", -9223372036854775808),
        ("j", "12", 12),
    ],
)
def test_java_style_integers(field: str, text: str, expected: int) -> None:
    header = decode_send_header(RequestCode.SEND_MESSAGE_V2, {**V2_SAMPLE, field: text})
    attribute = {"e": "queue_id", "g": "born_timestamp", "j": "reconsume_times"}[field]
    assert getattr(header, attribute) == expected


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("d", ""),
        ("e", "2147483648"),
        ("e", "-2147483649"),
        ("e", " 1"),
        ("e", "1_0"),
        ("e", "1.0"),
        ("e", "٣"),
        ("f", "0x10"),
        ("g", "9223372036854775808"),
        ("g", "1" * 5000),
        ("h", "abc"),
        ("j", ""),
        ("l", "x"),
    ],
)
def test_malformed_integers_name_the_field(field: str, text: str) -> None:
    with pytest.raises(HeaderFieldError, match=f"the custom field {field} is ") as info:
        decode_send_header(RequestCode.SEND_MESSAGE_V2, {**V2_SAMPLE, field: text})
    assert info.value.field == field
    assert info.value.response_code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("TRUE", True), ("True", True), ("1", True), ("false", False),
     ("0", False), ("", False), ("yes", False), ("2", False)],
)  # fmt: skip
def test_booleans_accept_true_any_case_and_one(text: str, expected: bool) -> None:
    header = decode_send_header(RequestCode.SEND_MESSAGE_V2, {**V2_SAMPLE, "m": text, "k": text})
    assert header.batch is expected
    assert header.unit_mode is expected
    route = GetRouteInfoRequestHeader.from_ext_fields(
        {"topic": "t", "acceptStandardJsonOnly": text}
    )
    assert route.accept_standard_json_only is expected


def test_optional_fields_absent() -> None:
    header = decode_send_header(RequestCode.SEND_MESSAGE_V2, V2_SAMPLE)
    assert (header.properties, header.reconsume_times, header.max_reconsume_times) == (
        None,
        None,
        None,
    )
    assert (header.unit_mode, header.batch, header.bname) == (False, False, None)
    assert GetRouteInfoRequestHeader.from_ext_fields({"topic": "t"}).accept_standard_json_only is (
        None
    )


def test_headers_are_frozen() -> None:
    header = decode_send_header(RequestCode.SEND_MESSAGE_V2, V2_SAMPLE)
    with pytest.raises(AttributeError):
        header.topic = "other"  # type: ignore[misc]
    assert [f.name for f in fields(header)][:2] == ["producer_group", "topic"]


def test_send_response_header() -> None:
    header = SendMessageResponseHeader("7F00000100002A9F0000000000000000", 2, 99)
    assert header.to_ext_fields() == {
        "msgId": "7F00000100002A9F0000000000000000",
        "queueId": "2",
        "queueOffset": "99",
    }
    with_tx = SendMessageResponseHeader("id", 1, 2, "tx")
    assert SendMessageResponseHeader.from_ext_fields(with_tx.to_ext_fields()) == with_tx
    with pytest.raises(HeaderFieldError, match="the custom field queueOffset is null"):
        SendMessageResponseHeader.from_ext_fields({"msgId": "x", "queueId": "1"})
    with pytest.raises(HeaderFieldError, match="queueId is not a valid int"):
        SendMessageResponseHeader.from_ext_fields(
            {"msgId": "x", "queueId": "q", "queueOffset": "1"}
        )


def test_unregister_client_id_wire_name() -> None:
    header = UnregisterClientRequestHeader.from_ext_fields(
        {"clientID": "1.2.3.4@1", "producerGroup": "", "consumerGroup": "g"}
    )
    assert header == UnregisterClientRequestHeader("1.2.3.4@1", "", "g")
    assert header.to_ext_fields()["clientID"] == "1.2.3.4@1"


def test_wire_fields_follow_upstream_names_and_java_types() -> None:
    assert wire_fields(PullMessageRequestHeader) == (
        ("consumer_group", "consumerGroup", "group", True),
        ("topic", "topic", "str", True),
        ("queue_id", "queueId", "int", True),
        ("queue_offset", "queueOffset", "long", True),
        ("max_msg_nums", "maxMsgNums", "int", True),
        ("sys_flag", "sysFlag", "int", True),
        ("commit_offset", "commitOffset", "long", True),
        ("suspend_timeout_millis", "suspendTimeoutMillis", "long", True),
        ("sub_version", "subVersion", "long", True),
        ("subscription", "subscription", "str", False),
        ("expression_type", "expressionType", "str", False),
    )
    assert wire_fields(UnregisterClientRequestHeader) == (
        ("client_id", "clientID", "client_id", True),
        ("producer_group", "producerGroup", "str", False),
        ("consumer_group", "consumerGroup", "group", False),
    )
    assert [kind for _a, _w, kind, _r in wire_fields(ConsumerSendMsgBackRequestHeader)] == [
        "long",
        "group",
        "int",
        "str",
        "str",
        "bool",
        "int",
    ]


def test_an_int_field_refuses_what_only_a_long_holds() -> None:
    ext = {"consumerGroup": "g", "topic": "t", "queueId": "1", "commitOffset": str(1 << 40)}
    assert UpdateConsumerOffsetRequestHeader.from_ext_fields(ext).commit_offset == 1 << 40
    with pytest.raises(HeaderFieldError, match="queueId"):
        UpdateConsumerOffsetRequestHeader.from_ext_fields({**ext, "queueId": str(1 << 40)})


def test_a_refused_number_is_cut_short_in_the_remark() -> None:
    ext = {"consumerGroup": "g", "topic": "t", "queueId": "9" * 100_000, "commitOffset": "1"}
    with pytest.raises(HeaderFieldError, match="queueId is out of int range") as info:
        UpdateConsumerOffsetRequestHeader.from_ext_fields(ext)
    assert len(str(info.value)) < 120
    with pytest.raises(HeaderFieldError, match="queueId is not a valid int: 'xxx") as info:
        UpdateConsumerOffsetRequestHeader.from_ext_fields({**ext, "queueId": "x" * 100_000})
    assert len(str(info.value)) < 120
