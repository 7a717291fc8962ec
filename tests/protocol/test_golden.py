"""Frames captured from real clients decode to exactly what they carry, and re-encode faithfully."""

from __future__ import annotations

import pytest

from protocol.batch import decode_batch_body
from protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_send_header,
)
from protocol.msgid import decode_offset_msg_id
from protocol.properties import decode_properties
from protocol.route import ConsumerListBody, HeartbeatData
from tests.golden import Vector, load_vectors

ACL = {"AccessKey": "", "OnsChannel": "ALIYUN"}
ALL_FILES = [
    "cpp_batch",
    "cpp_producer_heartbeat",
    "cpp_producer_send",
    "cpp_pull_consumer",
    "cpp_push_consumer",
    "ons_producer_send",
]


def decode_one(vector: Vector) -> RemotingCommand:
    commands = FrameDecoder().feed(vector.raw)
    assert len(commands) == 1
    return commands[0]


def assert_cpp_request(cmd: RemotingCommand, code: int, opaque: int) -> None:
    assert cmd.code == code
    assert cmd.language == LanguageCode.CPP
    assert cmd.version == 63
    assert cmd.opaque == opaque
    assert cmd.flag == 0
    assert cmd.remark is None  # the C++ client sends ""
    assert cmd.serialize_type is SerializeType.JSON
    assert not cmd.is_response
    assert not cmd.is_oneway
    assert {k: cmd.ext_fields[k] for k in ACL} == ACL
    assert cmd.ext_fields["Signature"].endswith("=")


def assert_stand_in_response(cmd: RemotingCommand, code: int, opaque: int) -> None:
    assert (cmd.code, cmd.opaque, cmd.flag) == (code, opaque, 1)
    assert cmd.language == LanguageCode.JAVA
    assert cmd.version == 401
    assert cmd.is_response
    assert cmd.serialize_type is SerializeType.JSON


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_vector_decodes_whole_and_byte_by_byte(name: str) -> None:
    vectors = load_vectors(name)
    assert vectors
    stream = b"".join(v.raw for v in vectors)
    whole = FrameDecoder().feed(stream)
    decoder = FrameDecoder()
    one_by_one = [cmd for i in range(len(stream)) for cmd in decoder.feed(stream[i : i + 1])]
    assert whole == one_by_one
    assert len(whole) == len(vectors)
    assert [c.is_response for c in whole] == [not v.is_request for v in vectors]
    assert decoder.buffered == 0


@pytest.mark.parametrize("name", ALL_FILES)
def test_reencoded_vectors_decode_to_the_same_command(name: str) -> None:
    for vector in load_vectors(name):
        cmd = decode_one(vector)
        assert FrameDecoder().feed(encode_frame(cmd)) == [cmd]


def test_cpp_send_message_v1_with_numeric_ext_fields() -> None:
    request, response = load_vectors("cpp_producer_send")
    cmd = decode_one(request)
    assert_cpp_request(cmd, RequestCode.SEND_MESSAGE, opaque=1)
    # JSON numbers arrive as strings; booleans as "0"/"1"
    assert cmd.ext_fields["queueId"] == "0"
    assert cmd.ext_fields["defaultTopicQueueNums"] == "4"
    assert cmd.ext_fields["sysFlag"] == "0"
    assert cmd.ext_fields["flag"] == "0"
    assert cmd.body == b"x" * 128
    header = decode_send_header(cmd.code, cmd.ext_fields)
    assert header == SendMessageRequestHeader(
        producer_group="interop_cpp_producer",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=1795332288376,
        flag=0,
        properties=header.properties,
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )
    assert header.properties is not None and header.properties.endswith("\x02")
    assert decode_properties(header.properties) == {
        "KEYS": "order_0",
        "TAGS": "TagA",
        "UNIQ_KEY": "0100007F0000C6790000F8111A730100",
        "WAIT": "true",
        "color": "blue",
    }
    reply = decode_one(response)
    assert_stand_in_response(reply, ResponseCode.SUCCESS, opaque=1)
    assert reply.remark is None
    assert reply.body is None
    sent = SendMessageResponseHeader.from_ext_fields(reply.ext_fields)
    assert sent == SendMessageResponseHeader("7F000001000090270000000000000000", 0, 0)
    assert decode_offset_msg_id(sent.msg_id) == ("127.0.0.1", 36903, 0)
    assert reply.ext_fields["MSG_REGION"] == "DefaultRegion"
    assert reply.ext_fields["TRACE_ON"] == "true"


def test_ons_send_message_v2_compact_letters() -> None:
    request, response = load_vectors("ons_producer_send")
    cmd = decode_one(request)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (310, 0, 121, 2, 0)
    assert cmd.remark is None  # absent
    assert cmd.ext_fields == {
        "a": "interop_ons_producer",
        "b": "TopicTest",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1795332302031",
        "h": "0",
        "i": "TAGS\x01TagA\x02KEYS\x01order_0\x02color\x01blue\x02",
        "j": "0",
        "k": "false",
    }
    assert cmd.body == b"x" * 128
    header = decode_send_header(cmd.code, cmd.ext_fields)
    assert header.producer_group == "interop_ons_producer"
    assert (header.topic, header.default_topic) == ("TopicTest", "TBW102")
    assert (header.default_topic_queue_nums, header.queue_id, header.sys_flag) == (4, 3, 0)
    assert (header.born_timestamp, header.flag, header.reconsume_times) == (1795332302031, 0, 0)
    assert (header.unit_mode, header.batch, header.max_reconsume_times, header.bname) == (
        False,
        False,
        None,
        None,
    )
    assert decode_properties(header.properties) == {
        "TAGS": "TagA",
        "KEYS": "order_0",
        "color": "blue",
    }
    reply = decode_one(response)
    assert_stand_in_response(reply, ResponseCode.SUCCESS, opaque=2)
    sent = SendMessageResponseHeader.from_ext_fields(reply.ext_fields)
    assert (sent.queue_id, sent.queue_offset) == (3, 0)
    assert decode_offset_msg_id(sent.msg_id) == ("127.0.0.1", 41009, 0)


def test_cpp_batch_body_splits_into_entries() -> None:
    request, response = load_vectors("cpp_batch")
    cmd = decode_one(request)
    assert_cpp_request(cmd, RequestCode.SEND_MESSAGE, opaque=1)
    header = decode_send_header(cmd.code, cmd.ext_fields)
    assert header.batch is True  # "1"
    assert header.unit_mode is False  # "0"
    assert header.born_timestamp == 1795332746783
    assert decode_properties(header.properties) == {"WAIT": "true"}
    assert cmd.body is not None and len(cmd.body) == 944
    entries = decode_batch_body(cmd.body)
    assert len(entries) == 4
    for n, entry in enumerate(entries):
        assert entry.flag == 0
        assert entry.body == b"x" * 128
        assert decode_properties(entry.properties) == {
            "KEYS": f"order_{n}",
            "TAGS": "TagA",
            "UNIQ_KEY": f"0100007F0000FD6E00009D102173{n + 1:02d}00",
            "WAIT": "true",
            "color": "blue",
        }
    reply = decode_one(response)
    assert_stand_in_response(reply, ResponseCode.SUCCESS, opaque=1)
    ids = reply.ext_fields["msgId"].split(",")
    assert [decode_offset_msg_id(i)[2] for i in ids] == [0, 0xE4, 0x1C8, 0x2AC]
    assert reply.ext_fields["queueOffset"] == "0"


def test_cpp_heartbeat_without_consumer_data_and_trailing_newline() -> None:
    request, response = load_vectors("cpp_producer_heartbeat")
    cmd = decode_one(request)
    assert_cpp_request(cmd, RequestCode.HEART_BEAT, opaque=2)
    assert set(cmd.ext_fields) == {"AccessKey", "OnsChannel", "Signature"}
    assert cmd.body is not None and cmd.body.endswith(b"}\n")
    heartbeat = HeartbeatData.from_json(cmd.body)
    assert heartbeat.client_id == "26776-127.0.0.1@DEFAULT"
    assert [p.group_name for p in heartbeat.producer_data_set] == ["interop_cpp_producer"]
    assert heartbeat.consumer_data_set == ()
    reply = decode_one(response)
    assert_stand_in_response(reply, ResponseCode.SUCCESS, opaque=2)
    assert reply.ext_fields == {}
    assert reply.body is None


def test_cpp_pull_consumer() -> None:
    request, response = load_vectors("cpp_pull_consumer")
    cmd = decode_one(request)
    assert_cpp_request(cmd, RequestCode.PULL_MESSAGE, opaque=1)
    assert cmd.body is None
    assert PullMessageRequestHeader.from_ext_fields(cmd.ext_fields) == PullMessageRequestHeader(
        consumer_group="interop_cpp_consumer",
        topic="TopicTest",
        queue_id=0,
        queue_offset=0,
        max_msg_nums=32,
        sys_flag=4,
        commit_offset=0,
        suspend_timeout_millis=20000,
        sub_version=0,
        subscription="*",
    )
    reply = decode_one(response)
    assert_stand_in_response(reply, ResponseCode.PULL_NOT_FOUND, opaque=1)
    assert reply.remark == "no new message"
    assert PullMessageResponseHeader.from_ext_fields(reply.ext_fields) == (
        PullMessageResponseHeader(0, 0, 0, 0)
    )


def test_cpp_push_consumer_session() -> None:
    frames = [decode_one(v) for v in load_vectors("cpp_push_consumer")]
    requests = frames[0::2]
    replies = frames[1::2]
    assert [(c.code, c.opaque) for c in requests] == [(34, 2), (38, 3), (14, 4), (11, 9), (15, 41)]
    assert [c.opaque for c in replies] == [2, 3, 4, 9, 41]
    for cmd in requests:
        assert_cpp_request(cmd, cmd.code, cmd.opaque)

    heartbeat = HeartbeatData.from_json(requests[0].body or b"")
    assert heartbeat.client_id == "28094-127.0.0.1@DEFAULT"
    assert heartbeat.producer_data_set == ()
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.group_name == "interop_cpp_consumer"
    assert consumer.consume_type == "CONSUME_PASSIVELY"  # sent as 1
    assert consumer.message_model == "CLUSTERING"  # sent as 1
    assert consumer.consume_from_where == "CONSUME_FROM_LAST_OFFSET"  # sent as 0
    assert [(s.topic, s.sub_string, s.sub_version) for s in consumer.subscription_data_set] == [
        ("%RETRY%interop_cpp_consumer", "*", 1795332319343),
        ("TopicTest", "*", 1795332319343),
    ]

    assert GetConsumerListByGroupRequestHeader.from_ext_fields(requests[1].ext_fields) == (
        GetConsumerListByGroupRequestHeader("interop_cpp_consumer")
    )
    assert ConsumerListBody.from_json(replies[1].body or b"") == ConsumerListBody(
        ("28094-127.0.0.1@DEFAULT",)
    )
    assert QueryConsumerOffsetRequestHeader.from_ext_fields(requests[2].ext_fields) == (
        QueryConsumerOffsetRequestHeader("interop_cpp_consumer", "%RETRY%interop_cpp_consumer", 0)
    )
    assert QueryConsumerOffsetResponseHeader.from_ext_fields(replies[2].ext_fields).offset == 0
    pull = PullMessageRequestHeader.from_ext_fields(requests[3].ext_fields)
    assert (pull.sys_flag, pull.suspend_timeout_millis, pull.sub_version) == (
        6,
        15000,
        1795332319343,
    )
    assert replies[3].code == ResponseCode.PULL_NOT_FOUND
    assert UpdateConsumerOffsetRequestHeader.from_ext_fields(requests[4].ext_fields) == (
        UpdateConsumerOffsetRequestHeader(
            "interop_cpp_consumer", "%RETRY%interop_cpp_consumer", 0, 0
        )
    )
    assert all(r.code == ResponseCode.SUCCESS for r in replies if r.opaque != 9)


def test_first_opaques_of_each_capture() -> None:
    firsts = {name: decode_one(load_vectors(name)[0]).opaque for name in ALL_FILES}
    assert firsts == {
        "cpp_batch": 1,
        "cpp_producer_heartbeat": 2,
        "cpp_producer_send": 1,
        "cpp_pull_consumer": 1,
        "cpp_push_consumer": 2,
        "ons_producer_send": 2,
    }
