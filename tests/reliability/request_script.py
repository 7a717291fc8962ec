"""Whole request sequences built from fuzzer bytes, for `atheris_requests.py`.

A fuzz input is read as a script: a few requests (sends, batches, pulls, offsets, heartbeats,
send-backs, routes, admin), each built from a valid template whose fields the input may replace
with hostile values (every JSON type, edge integers, odd or huge strings, names shared with
earlier requests, offsets the broker handed out), optionally in the binary header form, with a
corrupted last frame now and then. Names come from a small pool so that requests meet in the
broker's shared tables (groups, consumers, topics, delay and retry queues); offsets come from
`Memory`, what earlier answers returned, so send-backs and pulls reach stored records.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from protocol.batch import BatchEntry, encode_batch_body
from protocol.codes import RequestCode, SerializeType
from protocol.command import ONEWAY_FLAG, RemotingCommand
from protocol.frame import encode_frame
from protocol.headers import SEND_HEADER_V1_NAMES
from tests.reliability.fuzz_values import (
    BOMB,
    CLIENTS,
    GROUPS,
    TOPICS,
    Memory,
    Source,
    hostile_value,
    mutate,
    pick,
    rare,
)


@dataclass(frozen=True)
class Request:
    """One frame of a script; `expects_answer` is False for a oneway request or a corrupt frame."""

    code: int
    frame: bytes
    opaque: int
    expects_answer: bool
    suspends: bool


def _send_fields(src: Source, memory: Memory, batch: bool) -> dict[str, Any]:
    delay = "DELAY\x01" + str(src.ConsumeIntInRange(0, 20))
    half = "TRAN_MSG\x01true\x02PGROUP\x01pg"
    properties = pick(src, ("TAGS\x01t\x02KEYS\x01k", delay, half, ""))
    return {
        "a": "pg",
        "b": pick(src, TOPICS[:2]),
        "c": "TBW102",
        "d": "4",
        "e": str(src.ConsumeIntInRange(-1, 4)),
        "f": pick(src, ("0", "0", "1", "4", "8")),  # compressed, transaction flags
        "g": "1700000000000",
        "h": "0",
        "i": properties,
        "j": "0",
        "k": "false",
        "l": "16",
        "m": "true" if batch else "false",
    }


def _pull_fields(src: Source) -> dict[str, Any]:
    return {
        "consumerGroup": pick(src, GROUPS[:2]),
        "topic": pick(src, TOPICS[:3]),
        "queueId": str(src.ConsumeIntInRange(0, 4)),
        "queueOffset": str(src.ConsumeIntInRange(0, 40)),
        "maxMsgNums": "32",
        "sysFlag": str(pick(src, (0, 2, 3, 6))),  # commit offset, suspend, subscription
        "commitOffset": "0",
        "suspendTimeoutMillis": pick(src, ("0", "100", "500")),
        "subVersion": "0",
        "subscription": pick(src, ("*", "a || b", "")),
        "expressionType": "TAG",
    }


def _heartbeat_body(src: Source, memory: Memory) -> bytes:
    subscription: dict[str, Any] = {
        "topic": pick(src, TOPICS[:3]),
        "subString": "*",
        "classFilterMode": False,
        "tagsSet": [],
        "codeSet": [],
        "subVersion": 1,
        "expressionType": "TAG",
    }
    consumer: dict[str, Any] = {
        "groupName": pick(src, GROUPS),
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "unitMode": False,
        "subscriptionDataSet": [subscription],
    }
    body: dict[str, Any] = {
        "clientID": pick(src, CLIENTS[:2]),
        "producerDataSet": [{"groupName": "pg"}],
        "consumerDataSet": [consumer],
    }
    target = pick(src, (body, consumer, subscription))
    mutate(src, memory, target)
    if rare(src, 15):
        return src.ConsumeBytes(src.ConsumeIntInRange(0, 64))
    return json.dumps(body).encode()


def _lock_body(src: Source, memory: Memory) -> bytes:
    queue: dict[str, Any] = {
        "topic": pick(src, TOPICS[:3]),
        "brokerName": "broker-a",
        "queueId": src.ConsumeIntInRange(-1, 4),
    }
    body: dict[str, Any] = {
        "consumerGroup": pick(src, GROUPS[:2]),
        "clientId": pick(src, CLIENTS[:2]),
        "mqSet": [queue] * src.ConsumeIntInRange(0, 3),
    }
    mutate(src, memory, pick(src, (body, queue)))
    return json.dumps(body).encode()


def _fields_and_body(src: Source, memory: Memory, code: int) -> tuple[dict[str, Any], bytes | None]:
    if code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
    ):
        batch = code == RequestCode.SEND_BATCH_MESSAGE
        fields = _send_fields(src, memory, batch)
        if code == RequestCode.SEND_MESSAGE:
            fields = {SEND_HEADER_V1_NAMES[ord(k) - 97]: v for k, v in fields.items()}
        if batch:
            entries = [
                BatchEntry(0, b"m%d" % i, "TAGS\x01b") for i in range(src.ConsumeIntInRange(0, 3))
            ]
            body = encode_batch_body(entries) if entries else src.ConsumeBytes(16)
        else:
            body = (
                BOMB if rare(src, 31) else src.ConsumeBytes(src.ConsumeIntInRange(0, 200)) or b"x"
            )
        return fields, body
    if code == RequestCode.PULL_MESSAGE:
        return _pull_fields(src), None
    if code == RequestCode.HEART_BEAT:
        return {}, _heartbeat_body(src, memory)
    if code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        return {}, _lock_body(src, memory)
    group, topic, queue = (
        pick(src, GROUPS[:2]),
        pick(src, TOPICS[:3]),
        str(src.ConsumeIntInRange(0, 4)),
    )
    templates: dict[int, dict[str, Any]] = {
        RequestCode.QUERY_CONSUMER_OFFSET: {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue,
        },
        RequestCode.UPDATE_CONSUMER_OFFSET: {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue,
            "commitOffset": str(pick(src, memory.queue_offsets)),
        },
        RequestCode.GET_MAX_OFFSET: {"topic": topic, "queueId": queue},
        RequestCode.GET_MIN_OFFSET: {"topic": topic, "queueId": queue},
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: {
            "topic": topic,
            "queueId": queue,
            "timestamp": "1700000000000",
        },
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: {"consumerGroup": group},
        RequestCode.CONSUMER_SEND_MSG_BACK: {
            "offset": str(pick(src, memory.physical_offsets)),
            "group": group,
            "delayLevel": str(src.ConsumeIntInRange(-1, 19)),
            "originMsgId": pick(src, memory.msg_ids) or "",
            "originTopic": topic,
            "maxReconsumeTimes": str(src.ConsumeIntInRange(0, 17)),
        },
        RequestCode.GET_ROUTEINFO_BY_TOPIC: {"topic": topic},
        RequestCode.VIEW_MESSAGE_BY_ID: {"offset": str(pick(src, memory.physical_offsets))},
        RequestCode.QUERY_MESSAGE: {
            "topic": topic,
            "key": pick(src, ("k", "healthy", *memory.msg_ids[-2:])),
            "maxNum": str(src.ConsumeIntInRange(-1, 100)),
            "beginTimestamp": "0",
            "endTimestamp": str(2**62),
        },
        RequestCode.END_TRANSACTION: {
            "producerGroup": "pg",
            "tranStateTableOffset": str(pick(src, memory.queue_offsets)),
            "commitLogOffset": str(pick(src, memory.physical_offsets)),
            "commitOrRollback": pick(src, ("8", "12", "0")),
            "fromTransactionCheck": pick(src, ("false", "true")),
        },
        RequestCode.UNREGISTER_CLIENT: {"clientID": pick(src, CLIENTS[:2]), "consumerGroup": group},
    }
    return templates.get(code, {}), None


CODES = (
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE,
    RequestCode.HEART_BEAT,
    RequestCode.HEART_BEAT,
    RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
    RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
    RequestCode.GET_ROUTEINFO_BY_TOPIC,
    RequestCode.GET_BROKER_CLUSTER_INFO,
    RequestCode.UNREGISTER_CLIENT,
    RequestCode.TRIGGER_DELETE_FILES,
    RequestCode.LOCK_BATCH_MQ,
    RequestCode.UNLOCK_BATCH_MQ,
    RequestCode.VIEW_MESSAGE_BY_ID,
    RequestCode.QUERY_MESSAGE,
    RequestCode.END_TRANSACTION,
)


def _frame(
    src: Source,
    code: int,
    fields: dict[str, Any],
    body: bytes | None,
    *,
    opaque: int,
    flag: int,
) -> tuple[bytes, bool]:
    """The frame, and whether its answer is still due (not when the flag itself was replaced)."""
    if rare(src, 7) and all(isinstance(v, str) for v in fields.values()):
        command = RemotingCommand(
            code,
            opaque=opaque,
            flag=flag,
            ext_fields=fields,
            body=body,
            serialize_type=SerializeType.ROCKETMQ,
        )
        return encode_frame(command), True
    header_fields: dict[str, Any] = {
        "code": code,
        "flag": flag,
        "language": "JAVA",
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": 401,
        "extFields": fields,
    }
    replaced = ""
    if rare(src, 15):
        replaced = pick(src, ("language", "version", "remark", "flag"))
        header_fields[replaced] = hostile_value(src, Memory())
    header = json.dumps(header_fields).encode()
    body = body or b""
    frame = struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body
    return frame, replaced != "flag"


def _corrupt(src: Source, frame: bytes) -> bytes:
    kind = src.ConsumeIntInRange(0, 3)
    if kind == 0:  # an absurd or negative total length
        return struct.pack(">i", pick(src, (0, 3, -1, 2**31 - 1, 1 << 25))) + frame[4:]
    if kind == 1:  # a header length past the frame
        return frame[:4] + struct.pack(">i", pick(src, (-1, 1 << 24, len(frame)))) + frame[8:]
    if kind == 2:  # flipped bytes in the header
        data = bytearray(frame)
        for _ in range(4):
            data[src.ConsumeIntInRange(8, len(data) - 1)] ^= 0xFF
        return bytes(data)
    return frame[4:]  # a frame without its length prefix


def build_script(src: Source, memory: Memory, first_opaque: int) -> tuple[list[Request], bool]:
    """The requests of one input, and whether the connection may not outlive it.

    A frame whose flag was replaced may claim to be a response; a malformed response ends the
    connection like garbage does (nobody waits for its answer), so the requests written after
    it are not owed answers. The same holds after a corrupted last frame.
    """
    requests: list[Request] = []
    broken = False
    for index in range(src.ConsumeIntInRange(1, 8)):
        code = src.ConsumeIntInRange(-5, 400) if rare(src, 31) else pick(src, CODES)
        fields, body = _fields_and_body(src, memory, code)
        fields = mutate(src, memory, fields)
        oneway = rare(src, 31)
        opaque = first_opaque + index
        flag = ONEWAY_FLAG if oneway else 0
        frame, due = _frame(src, code, fields, body, opaque=opaque, flag=flag)
        suspends = code == RequestCode.PULL_MESSAGE
        requests.append(Request(code, frame, opaque, due and not oneway and not broken, suspends))
        broken = broken or not due
    if rare(src, 15):
        last = requests[-1]
        requests[-1] = Request(last.code, _corrupt(src, last.frame), last.opaque, False, False)
        broken = True
    return requests, broken
