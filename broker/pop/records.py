"""What pop consumption writes to the revive topic, in RocketMQ 5's shapes.

Every pop that hands messages out of one queue writes a checkpoint (tag `ck`, 5.x's
`PopCheckPoint` as JSON with its short field names), every ACK an ack record (tag `ack`, 5.x's
`AckMsg`), both to `rmq_sys_REVIVE_LOG_<cluster>`, in the queue the receipt handles name
(`reviveQid`). Read back in order after a restart they give the messages still in flight: a
checkpoint whose offsets are not all acknowledged by a later ack record.

`with_pop_ck` rewrites a stored record as a popped message is handed out: under the topic the
consumer asked for (a retried one is stored in the pop retry topic) and with its receipt
handle in the POP_CK property.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from protocol.properties import decode_properties, encode_properties
from store.decode import CommitLogRecord
from store.message import MessageExtBrokerInner, java_string_hash

REVIVE_TOPIC_PREFIX: Final = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG: Final = "ck"
ACK_TAG: Final = "ack"
POP_CK: Final = "POP_CK"
FIRST_POP_TIME: Final = "1ST_POP_TIME"


class RecordError(ValueError):
    """A revive-topic record that is not a checkpoint or ack this broker wrote."""


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


@dataclass(slots=True)
class CheckPoint:
    """One pop from one queue: the queue offsets it handed out, from `start_offset` on."""

    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    broker_name: str
    #: each handed-out offset minus `start_offset`, ascending
    diffs: list[int]
    #: where the checkpoint stands in its revive queue (set once stored)
    revive_offset: int = -1
    acked: set[int] = field(default_factory=set)
    #: a FIFO pop: not revived to the retry topic but handed out again from its queue
    order: bool = False

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.diffs]

    def unacked(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "so": self.start_offset,
            "pt": self.pop_time,
            "it": self.invisible_time,
            "bm": 0,
            "n": len(self.diffs),
            "q": self.queue_id,
            "t": self.topic,
            "c": self.group,
            "ro": self.revive_offset,
            "d": self.diffs,
            "bn": self.broker_name,
        }
        if self.order:
            data["o"] = True  # not in 5.x, whose FIFO state is a file of its own
        return data

    @classmethod
    def from_json(cls, data: object, revive_qid: int) -> CheckPoint:
        try:
            assert isinstance(data, dict)
            diffs = [int(d) for d in data["d"]]
            return cls(
                str(data["c"]),
                str(data["t"]),
                int(data["q"]),
                int(data["so"]),
                int(data["pt"]),
                int(data["it"]),
                revive_qid,
                str(data.get("bn", "")),
                diffs,
                order=bool(data.get("o", False)),
            )
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"not a checkpoint: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class AckRecord:
    group: str
    topic: str
    queue_id: int
    start_offset: int
    ack_offset: int
    pop_time: int
    broker_name: str

    @property
    def ck_key(self) -> tuple[str, str, int, int, int]:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    def to_json(self) -> dict[str, Any]:
        return {
            "ao": self.ack_offset,
            "so": self.start_offset,
            "c": self.group,
            "t": self.topic,
            "q": self.queue_id,
            "pt": self.pop_time,
            "bn": self.broker_name,
        }

    @classmethod
    def from_json(cls, data: object) -> AckRecord:
        try:
            assert isinstance(data, dict)
            return cls(
                str(data["c"]),
                str(data["t"]),
                int(data["q"]),
                int(data["so"]),
                int(data["ao"]),
                int(data["pt"]),
                str(data.get("bn", "")),
            )
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"not an ack record: {exc!r}") from None


def revive_message(
    topic: str, revive_qid: int, tag: str, payload: dict[str, Any], store_host: tuple[str, int]
) -> MessageExtBrokerInner:
    """A checkpoint or ack record as the message stored in the revive topic; stored once it is
    on disk as the broker's flush mode says (`wait_store_msg_ok`)."""
    return MessageExtBrokerInner(
        topic=topic,
        queue_id=revive_qid,
        body=json.dumps(payload, separators=(",", ":")).encode(),
        properties_string=encode_properties({"TAGS": tag}),
        store_host=store_host,
        born_host=store_host,
        tags_code=java_string_hash(tag),
    )


def parse_revive_record(record: CommitLogRecord) -> CheckPoint | AckRecord:
    """The checkpoint or ack record a revive-topic message holds; `RecordError` otherwise."""
    tag = decode_properties(record.properties).get("TAGS")
    try:
        data = json.loads(record.body or b"")
    except ValueError as exc:
        raise RecordError(f"unreadable revive record: {exc}") from None
    if tag == CK_TAG:
        return CheckPoint.from_json(data, record.queue_id)
    if tag == ACK_TAG:
        return AckRecord.from_json(data)
    raise RecordError(f"unknown revive record tag {tag!r}")


def with_pop_ck(raw: bytes, record: CommitLogRecord, topic: str, receipt: str) -> bytes:
    """The stored bytes `raw` of `record` under `topic` with POP_CK `receipt`: the fields
    before the topic kept, the topic and properties written anew, the total size fixed."""
    props = decode_properties(record.properties)
    props[POP_CK] = receipt
    old_tail = 1 + len(record.topic.encode()) + 2 + len(record.properties.encode())
    head = raw[4 : record.total_size - old_tail]
    topic_b = topic.encode()
    props_b = encode_properties(props).encode()
    tail = bytes([len(topic_b)]) + topic_b + len(props_b).to_bytes(2, "big") + props_b
    total = 4 + len(head) + len(tail)
    return total.to_bytes(4, "big") + head + tail
