"""QueryRoute for RocketMQ 5 clients: the topic's queues on this broker, reached at the gRPC
endpoint.

One `MessageQueue` per queue id up to max(read, write) queue counts, each with the permission
it has (a queue id below the read count is readable, below the write count writable, and the
broker's and topic's permission bits apply on top), this broker's name and id, and `endpoints`
= the address clients reach the gRPC port at.

Message types: 5.x keeps a topic's type in its `message.type` attribute and refuses other types;
a 4.9 topic config has no such attribute, so every queue accepts NORMAL, FIFO, DELAY and
TRANSACTION, as a 4.x topic takes every kind of message.

An unknown topic is created from the template topic (TBW102) when `auto_create_topic_enable`
allows it, as the first send of a 4.x producer would; otherwise TOPIC_NOT_FOUND.
"""

from __future__ import annotations

import ipaddress
from typing import Final

import structlog

from broker.context import BrokerContext
from broker.grpc.methods import CallContext, Message
from broker.grpc.status import ok, status
from broker.topic_config import PERM_READ, PERM_WRITE, TopicConfig
from protocol import names
from protocol.errors import HeaderFieldError
from protocol.v2 import load

log = structlog.get_logger()

#: the template topic auto-created topics copy (4.9's AUTO_CREATE_TOPIC_KEY_TOPIC)
TEMPLATE_TOPIC: Final = "TBW102"
ACCEPTED_TYPES: Final = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")


def endpoints_message(endpoint: tuple[str, int]) -> Message:
    """5.x `Endpoints` for host:port (scheme from the host's form)."""
    definition, _ = load()
    host, port = endpoint
    try:
        scheme = "IPv4" if ipaddress.ip_address(host).version == 4 else "IPv6"
    except ValueError:
        scheme = "DOMAIN_NAME"
    return definition.Endpoints(
        scheme=definition.AddressScheme.Value(scheme),
        addresses=[definition.Address(host=host, port=port)],
    )


def _permission(queue_id: int, config: TopicConfig, broker_perm: int) -> str:
    perm = config.perm & broker_perm
    readable = queue_id < config.read_queue_nums and perm & PERM_READ
    writable = queue_id < config.write_queue_nums and perm & PERM_WRITE
    if readable and writable:
        return "READ_WRITE"
    if readable:
        return "READ"
    return "WRITE" if writable else "NONE"


async def find_or_create(broker: BrokerContext, topic: str) -> TopicConfig | None:
    """The topic's config, auto-created (and persisted) when the broker allows it."""
    found = broker.topics.find(topic)
    if found is not None or not broker.config.auto_create_topic_enable:
        return found
    created = broker.topics.create_in_send(
        topic, TEMPLATE_TOPIC, broker.config.default_topic_queue_nums, 0
    )
    if created is not None:
        await broker.topics.persist()
        log.info("grpc_topic_created", topic=topic)
    return created


class RouteService:
    def __init__(self, broker: BrokerContext, endpoint: tuple[str, int]) -> None:
        self.broker = broker
        self.endpoint = endpoint

    async def query_route(self, request: Message, context: CallContext) -> Message:
        definition, service = load()
        topic = request.topic.name
        try:
            names.check_topic_name("topic", topic)
        except HeaderFieldError as exc:
            return service.QueryRouteResponse(status=status("ILLEGAL_TOPIC", str(exc)))
        config = await find_or_create(self.broker, topic)
        if config is None:
            return service.QueryRouteResponse(
                status=status("TOPIC_NOT_FOUND", f"topic {topic} not found")
            )
        broker_config = self.broker.config
        broker = definition.Broker(
            name=broker_config.broker_name,
            id=broker_config.broker_id,
            endpoints=endpoints_message(self.endpoint),
        )
        types = [definition.MessageType.Value(t) for t in ACCEPTED_TYPES]
        queues = [
            definition.MessageQueue(
                topic=request.topic,
                id=queue_id,
                permission=definition.Permission.Value(
                    _permission(queue_id, config, broker_config.broker_permission)
                ),
                broker=broker,
                accept_message_types=types,
            )
            for queue_id in range(max(config.read_queue_nums, config.write_queue_nums))
        ]
        return service.QueryRouteResponse(status=ok(), message_queues=queues)
