"""What a request asks for: its access key, signature, signed content and needed permissions.

Mirrors RocketMQ 4.9's `PlainAccessValidator.parse`: per request code, the topics and groups
(as retry topics) the request touches and the permission each needs. Sends need PUB on the topic
(SUB on a retry topic, which only a consumer group re-sends to); pulls, offset updates and
queries need SUB on the topic and on the consumer group; a heartbeat needs SUB on every group and
subscribed topic it announces; codes not listed need no resource, only a valid signature.
Beyond upstream: batch and reply sends (320, 324, 325) need PUB like other sends, and
QUERY_CONSUMER_OFFSET needs SUB like UPDATE_CONSUMER_OFFSET; 5.x's pop, ack and change of
invisible time need SUB on the topic and the group, as a pull does.
Sans-IO: a decoded `RemotingCommand` in, an `AccessResource` out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from broker.acl.permission import Permission, is_retry_topic, retry_topic
from protocol.acl_signing import ACCESS_KEY, SIGNATURE
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from protocol.route import HeartbeatData

_SEND_V1: Final = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE})
_SEND_V2: Final = frozenset(
    {
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    }
)
#: read-only name-server lookups: the name server checks no ACL upstream, and clients look up
#: routes before they know which credentials a broker wants
NAMESRV_LOOKUP_CODES: Final = frozenset(
    {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_TOPICS_BY_CLUSTER,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
    }
)
#: group field of the consumer-side codes
_GROUP_FIELD: Final[dict[int, str]] = {
    RequestCode.CONSUMER_SEND_MSG_BACK: "group",
    RequestCode.PULL_MESSAGE: "consumerGroup",
    RequestCode.UNREGISTER_CLIENT: "consumerGroup",
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: "consumerGroup",
    RequestCode.UPDATE_CONSUMER_OFFSET: "consumerGroup",
    RequestCode.QUERY_CONSUMER_OFFSET: "consumerGroup",
    RequestCode.POP_MESSAGE: "consumerGroup",
    RequestCode.ACK_MESSAGE: "consumerGroup",
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: "consumerGroup",
}
_TOPIC_SUB_CODES: Final = frozenset(
    {
        RequestCode.PULL_MESSAGE,
        RequestCode.QUERY_MESSAGE,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.POP_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
    }
)


class AccessRequestError(ValueError):
    """The request's fields or body cannot be read for the access check (it is refused)."""


@dataclass(frozen=True, slots=True)
class AccessResource:
    request_code: int
    access_key: str | None
    signature: str | None
    #: resource (topic, or a group's retry topic) -> permission needed
    needed: Mapping[str, Permission] = field(default_factory=dict)


def parse_access_resource(request: RemotingCommand) -> AccessResource:
    """The resource a request needs; `AccessRequestError` if its heartbeat body is unreadable."""
    fields = request.ext_fields
    return AccessResource(
        request.code,
        fields.get(ACCESS_KEY),
        fields.get(SIGNATURE),
        needed_permissions(request.code, fields, request.body),
    )


def needed_permissions(
    code: int, fields: Mapping[str, str], body: bytes | None
) -> dict[str, Permission]:
    needed: dict[str, Permission] = {}
    if code in _SEND_V1 or code in _SEND_V2:
        topic = fields.get("b") if code in _SEND_V2 else None
        _add_send(needed, topic if topic is not None else fields.get("topic"))
    elif code == RequestCode.HEART_BEAT:
        _add_heartbeat(needed, body)
    else:
        group_field = _GROUP_FIELD.get(code)
        if code in _TOPIC_SUB_CODES:
            _add(needed, fields.get("topic"), Permission.SUB)
        if group_field is not None:
            _add(needed, _retry(fields.get(group_field)), Permission.SUB)
    return needed


def _add(needed: dict[str, Permission], resource: str | None, perm: Permission) -> None:
    if resource is not None:
        needed[resource] = perm


def _retry(group: str | None) -> str | None:
    return None if group is None else retry_topic(group)


def _add_send(needed: dict[str, Permission], topic: str | None) -> None:
    if topic is not None and is_retry_topic(topic):
        # Only a consumer re-sends to its group's retry topic: SUB on that group.
        _add(needed, topic, Permission.SUB)
    else:
        _add(needed, topic, Permission.PUB)


def _add_heartbeat(needed: dict[str, Permission], body: bytes | None) -> None:
    try:
        heartbeat = HeartbeatData.from_json(body or b"")
    except (RemotingProtocolError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise AccessRequestError(f"heartbeat body is unreadable: {exc}") from None
    for consumer in heartbeat.consumer_data_set:
        _add(needed, retry_topic(consumer.group_name), Permission.SUB)
        for subscription in consumer.subscription_data_set:
            _add(needed, subscription.topic, Permission.SUB)
