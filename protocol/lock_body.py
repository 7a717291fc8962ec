"""JSON bodies of LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42), the orderly consumer's queue locks.

Both requests carry RocketMQ's `LockBatchRequestBody` / `UnlockBatchRequestBody` shape
(`consumerGroup`, `clientId`, `mqSet` of `MessageQueue`s: `topic`, `brokerName`, `queueId`);
a lock is answered with `LockBatchResponseBody` (`lockOKMQSet`). The body is read field by field
(`_json_body`): the group and client id obey their rules, every queue is typed, and a set larger
than `MAX_MQ_SET` is refused, so one request costs the broker a bounded amount of work.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from ._json_body import JsonObject, load_object
from .errors import HeaderFieldError
from .names import SUBSCRIPTION_TOPIC_MAX_LENGTH, check_client_id, check_group_name, check_label

#: queues one request may name: far above the queues of the topics one consumer subscribes
MAX_MQ_SET: Final = 10_000


def _check_topic(field: str, topic: str) -> str:
    return check_label(field, topic, "topic", SUBSCRIPTION_TOPIC_MAX_LENGTH)


def _check_broker_name(field: str, name: str) -> str:
    return check_label(field, name, "broker name", SUBSCRIPTION_TOPIC_MAX_LENGTH)


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_dict(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def read(cls, d: JsonObject) -> MessageQueue:
        return cls(
            d.name("topic", _check_topic),
            d.name("brokerName", _check_broker_name),
            d.int32("queueId"),
        )


@dataclass(frozen=True, slots=True)
class LockBatchBody:
    """The request body of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ."""

    consumer_group: str
    client_id: str
    mq_set: tuple[MessageQueue, ...]

    def to_json(self) -> bytes:
        return _dumps(
            {
                "clientId": self.client_id,
                "consumerGroup": self.consumer_group,
                "mqSet": [mq.to_dict() for mq in self.mq_set],
            }
        )

    @classmethod
    def from_json(cls, body: bytes, what: str = "lock batch") -> LockBatchBody:
        d = load_object(body, what)
        count = len(d.array("mqSet"))
        if count > MAX_MQ_SET:
            raise HeaderFieldError(
                "mqSet", f"{what} body mqSet names {count} queues, more than {MAX_MQ_SET}"
            )
        queues = d.objects("mqSet")
        return cls(
            d.name("consumerGroup", check_group_name),
            d.name("clientId", check_client_id),
            tuple(dict.fromkeys(MessageQueue.read(q) for q in queues)),
        )


def encode_locked(queues: list[MessageQueue]) -> bytes:
    """`LockBatchResponseBody`: the queues the caller holds now."""
    return _dumps({"lockOKMQSet": [mq.to_dict() for mq in sorted(queues)]})


def decode_locked(body: bytes) -> tuple[MessageQueue, ...]:
    d = load_object(body, "lock batch response")
    return tuple(MessageQueue.read(q) for q in d.objects("lockOKMQSet"))


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
