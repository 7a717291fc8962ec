"""Admin requests of the name-server role, answered as 4.9's `DefaultRequestProcessor` does.

The role's route table is this broker's topic table, so GET_ALL_TOPIC_LIST_FROM_NAMESERVER
(206) lists every topic the broker has (system ones included, as a 4.9 broker registers
them), and GET_TOPICS_BY_CLUSTER (224) the same for the broker's own cluster (an empty list
for any other). DELETE_TOPIC_IN_NAMESRV (216) hides a topic's route (TOPIC_NOT_EXIST) until
the broker's table changes that topic, as a 4.9 name server forgets a topic until the broker
registers it again. WIPE_WRITE_PERM_OF_BROKER (205) makes every route read-only (sends move to
other brokers) and answers how many topics it touched; ADD_WRITE_PERM_OF_BROKER (327) undoes
it. Both last until undone or the broker restarts; a 4.9 broker's next registration (every
30 s) would undo a wipe by itself. Neither changes what the broker itself accepts.
"""

from __future__ import annotations

import structlog

from broker.processors import RequestContext
from protocol.admin_topic import (
    AddWritePermOfBrokerResponseHeader,
    BrokerNameRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetTopicsByClusterRequestHeader,
    TopicList,
    WipeWritePermOfBrokerResponseHeader,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

log = structlog.get_logger()


def _routed_topics(ctx: RequestContext) -> frozenset[str]:
    admin = ctx.broker.admin
    return frozenset(
        name
        for name, config in ctx.broker.topics.topics().items()
        if not admin.route_hidden(name, config)
    )


class GetAllTopicListProcessor:
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        body = TopicList(_routed_topics(ctx)).to_json()
        return request.make_response(ResponseCode.SUCCESS, body=body)


class GetTopicsByClusterProcessor:
    """GET_TOPICS_BY_CLUSTER (224)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields)
        own = header.cluster == ctx.broker.config.broker_cluster_name
        body = TopicList(_routed_topics(ctx) if own else frozenset()).to_json()
        return request.make_response(ResponseCode.SUCCESS, body=body)


class DeleteTopicInNamesrvProcessor:
    """DELETE_TOPIC_IN_NAMESRV (216): SUCCESS, whether or not the route existed (as 4.9)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(request.ext_fields)
        cluster = header.cluster_name
        ours = not cluster or cluster == ctx.broker.config.broker_cluster_name
        config = ctx.broker.topics.find(header.topic)
        if ours and config is not None:
            ctx.broker.admin.hidden_routes[header.topic] = config
        log.info(
            "topic_route_deleted",
            topic=header.topic,
            existed=ours and config is not None,
            remote=ctx.remote_text,
        )
        return request.make_response(ResponseCode.SUCCESS)


class WritePermOfBrokerProcessor:
    """WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = BrokerNameRequestHeader.from_ext_fields(request.ext_fields)
        wipe = request.code == RequestCode.WIPE_WRITE_PERM_OF_BROKER
        count = 0
        if header.broker_name == ctx.broker.config.broker_name:
            count = len(_routed_topics(ctx))
            ctx.broker.admin.write_wiped = wipe
        log.info(
            "broker_write_perm_wiped" if wipe else "broker_write_perm_added",
            broker_name=header.broker_name,
            topics=count,
            remote=ctx.remote_text,
        )
        ext = (
            WipeWritePermOfBrokerResponseHeader(count)
            if wipe
            else AddWritePermOfBrokerResponseHeader(count)
        ).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)
