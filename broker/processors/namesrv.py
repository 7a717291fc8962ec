"""The name-server role: routes, cluster info and client lifecycle answered by the broker itself.

A single broker is its own name server, so clients can point `namesrvAddr` at it. A route is
served for any topic the broker has or would create: a known topic with its own queues, an
unknown one (while auto-creation is on) with the queue count its first send will create, as
RocketMQ's `TBW102` fallback would give the client, an unknown `%RETRY%` or `%DLQ%` topic with
the queues its group's heartbeat or send back will create. A name no send could create, or one
past `auto_create_topic_max_num`, has no route (TOPIC_NOT_EXIST). HEART_BEAT registers the
consumer groups it names (their retry limits feed the DLQ decision) and is answered with
version 407, which clients remember per broker.
"""

from __future__ import annotations

from typing import Final

import structlog

from broker.processors import RequestContext
from broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    DLQ_NUMS_PER_GROUP,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
    check_new_topic,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from protocol.headers import GetRouteInfoRequestHeader, UnregisterClientRequestHeader
from protocol.route import BrokerData, ClusterInfo, HeartbeatData, QueueData, TopicRouteData

#: the Java client's default `defaultTopicQueueNums`: what its first send asks to create
CLIENT_DEFAULT_TOPIC_QUEUE_NUMS: Final = 4
FAQ_SUFFIX: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

log = structlog.get_logger()


def _broker_data(ctx: RequestContext) -> BrokerData:
    broker = ctx.broker
    return BrokerData(
        broker.config.broker_cluster_name, broker.config.broker_name, {0: broker.addr}
    )


def _route_topic(ctx: RequestContext, topic: str) -> TopicConfig | None:
    """The topic as it is, or as the broker would create it; None when it could not be."""
    topics = ctx.broker.topics
    found = topics.find(topic)
    if found is not None:
        return found
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        # Created by the group's heartbeat or first send back, with the group's retry queues.
        group = ctx.broker.groups.find(topic.removeprefix(RETRY_GROUP_TOPIC_PREFIX))
        queues = group.retry_queue_nums if group is not None else 1
        perm = PERM_READ | PERM_WRITE
    elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        queues, perm = DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE
    else:
        template = topics.find(AUTO_CREATE_TOPIC_KEY_TOPIC)
        if template is None or not template.perm & PERM_INHERIT:
            return None
        queues = min(CLIENT_DEFAULT_TOPIC_QUEUE_NUMS, template.write_queue_nums)
        perm = template.perm & ~PERM_INHERIT
    try:  # a name no send could create, or a full table: no route either
        check_new_topic(topic, queues, len(topics.topics()), topics.auto_create_topic_max_num)
    except HeaderFieldError:
        return None
    return TopicConfig(topic, queues, queues, perm)


class GetRouteInfoProcessor:
    """GET_ROUTEINFO_BY_TOPIC (105): the route of this broker for the topic, with the queues of
    every peer broker registered with this role that has it (or would create it)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        config = broker.config
        topic = _route_topic(ctx, header.topic)
        if topic is not None and broker.admin.route_hidden(header.topic, topic):
            topic = None
        would_create = topic is not None and broker.topics.find(header.topic) is None
        if would_create and broker.peers.has(header.topic, config.broker_name):
            # as a name server would: a topic some broker has is routed to those that have it
            topic = None
        peer_queues, peer_brokers = broker.peers.route(
            header.topic, config.broker_name, would_create=would_create
        )
        if topic is None and not peer_queues:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}{FAQ_SUFFIX}",
            )
        queues, brokers = peer_queues, peer_brokers
        if topic is not None:
            queue = QueueData(
                config.broker_name,
                topic.read_queue_nums,
                topic.write_queue_nums,
                # a broker without WRITE announces every topic read-only (as its registration
                # does); WIPE_WRITE_PERM_OF_BROKER takes WRITE off every route, ADD_WRITE_PERM
                # gives R|W
                _route_perm(topic.perm, config.broker_permission, broker.admin.write_wiped),
                topic.topic_sys_flag,
            )
            queues = sorted([queue, *peer_queues], key=lambda q: q.broker_name)
            brokers = sorted([_broker_data(ctx), *peer_brokers], key=lambda b: b.broker_name)
        route = TopicRouteData(tuple(queues), tuple(brokers))
        return request.make_response(ResponseCode.SUCCESS, body=route.to_json())


def _route_perm(perm: int, broker_permission: int, wiped: bool) -> int:
    if not broker_permission & PERM_WRITE:
        return broker_permission
    return perm & ~PERM_WRITE if wiped else perm


class GetBrokerClusterInfoProcessor:
    """GET_BROKER_CLUSTER_INFO (106): this broker and the peers registered with this role."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        config = ctx.broker.config
        info = ClusterInfo(
            {config.broker_name: _broker_data(ctx)},
            {config.broker_cluster_name: [config.broker_name]},
        )
        info = ctx.broker.peers.merged_cluster_info(info)
        return request.make_response(ResponseCode.SUCCESS, body=info.to_json())


class HeartbeatProcessor:
    """HEART_BEAT (34): note the client's consumer groups; answer SUCCESS, version 407."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        heartbeat = HeartbeatData.from_json(request.body or b"{}")
        groups = ctx.broker.groups
        created = False
        try:
            for consumer in heartbeat.consumer_data_set:
                created = groups.ensure(consumer.group_name) or created
        finally:  # a group refused after others were created: those are kept, and persisted
            if created:
                await groups.persist()
        for listener in ctx.broker.heartbeat_listeners:
            await listener(heartbeat, ctx, request)
        log.debug(
            "heartbeat",
            client_id=heartbeat.client_id,
            producers=[p.group_name for p in heartbeat.producer_data_set],
            consumers=[c.group_name for c in heartbeat.consumer_data_set],
        )
        return request.make_response(ResponseCode.SUCCESS)


class UnregisterClientProcessor:
    """UNREGISTER_CLIENT (35): forget the client's consumer registrations; answer SUCCESS."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        ctx.broker.consumers.unregister(header.client_id, header.consumer_group)
        log.debug("client_unregistered", client_id=header.client_id)
        return request.make_response(ResponseCode.SUCCESS)


class PeerRegistrationProcessor:
    """REGISTER_BROKER (103), UNREGISTER_BROKER (104), QUERY_DATA_VERSION (322) from a peer
    broker whose `namesrv_addr` names this one: answered as the standalone name server does."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return await ctx.broker.peers.answer(request, ctx.conn_id, ctx.remote_text, ctx.remote)
