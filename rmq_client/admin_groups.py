"""Client calls of the consumer-group and connection admin requests, for tests and tools.

Each function sends one request on an open connection (`rmq_client.producer.open_producer`; with
ACL on, give it credentials) and returns the decoded body. A response other than SUCCESS
raises `SendError` with the broker's code and remark.
"""

from __future__ import annotations

from typing import Any

from protocol.admin_group import (
    ConsumerConnection,
    ConsumerOffsetWrapper,
    ConsumeStats,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GroupList,
    ProducerConnection,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    load_value,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.producer import Producer, SendError


async def call(
    conn: Producer,
    code: int,
    ext_fields: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout_s: float | None = None,
) -> RemotingCommand:
    """One admin request; the response when it is SUCCESS, else `SendError`."""
    response = await conn.request(RemotingCommand.request(code, ext_fields, body), timeout_s)
    if response.code != ResponseCode.SUCCESS:
        raise SendError(response.code, response.remark)
    return response


async def update_subscription_group(conn: Producer, config: SubscriptionGroupConfig) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: create `config.group_name` or replace its settings."""
    await call(conn, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())


async def get_all_subscription_groups(conn: Producer) -> SubscriptionGroupWrapper:
    response = await call(conn, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    return SubscriptionGroupWrapper.decode(response.body)


async def delete_subscription_group(
    conn: Producer, group: str, *, remove_offset: bool = False
) -> None:
    """DELETE_SUBSCRIPTIONGROUP; with `remove_offset` the group's committed offsets go too."""
    header = DeleteSubscriptionGroupRequestHeader(group, remove_offset)
    await call(conn, RequestCode.DELETE_SUBSCRIPTIONGROUP, header.to_ext_fields())


async def get_consume_stats(conn: Producer, group: str, topic: str | None = None) -> ConsumeStats:
    """Per queue: the queue's end, the group's committed offset and its last consumed message's
    store time; every topic the group committed in when `topic` is None."""
    header = GetConsumeStatsRequestHeader(group, topic)
    response = await call(conn, RequestCode.GET_CONSUME_STATS, header.to_ext_fields())
    return ConsumeStats.decode(response.body)


async def get_all_consumer_offsets(conn: Producer) -> ConsumerOffsetWrapper:
    response = await call(conn, RequestCode.GET_ALL_CONSUMER_OFFSET)
    return ConsumerOffsetWrapper.decode(response.body)


async def get_consumer_connections(conn: Producer, group: str) -> ConsumerConnection:
    """GET_CONSUMER_CONNECTION_LIST; `SendError` CONSUMER_NOT_ONLINE when no client is live."""
    header = GetConsumerConnectionListRequestHeader(group)
    response = await call(conn, RequestCode.GET_CONSUMER_CONNECTION_LIST, header.to_ext_fields())
    return ConsumerConnection.decode(response.body)


async def get_producer_connections(conn: Producer, group: str) -> ProducerConnection:
    header = GetProducerConnectionListRequestHeader(group)
    response = await call(conn, RequestCode.GET_PRODUCER_CONNECTION_LIST, header.to_ext_fields())
    return ProducerConnection.decode(response.body)


async def query_topic_consume_by_who(conn: Producer, topic: str) -> list[str]:
    """The groups consuming `topic` (live subscriptions and committed offsets), sorted."""
    header = QueryTopicConsumeByWhoRequestHeader(topic)
    response = await call(conn, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, header.to_ext_fields())
    return sorted(GroupList.decode(response.body).groups)


async def reset_offset_by_time(
    conn: Producer, topic: str, group: str, timestamp_ms: int, *, force: bool = True
) -> ResetOffsetBody:
    """INVOKE_BROKER_TO_RESET_OFFSET: the group's offsets of `topic` move to the first message
    stored at or after `timestamp_ms` (-1: each queue's end); the offsets set."""
    header = ResetOffsetRequestHeader(topic, group, timestamp_ms, force)
    response = await call(conn, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header.to_ext_fields())
    return ResetOffsetBody.decode(response.body)


async def get_consumer_running_info(
    conn: Producer, group: str, client_id: str, *, jstack: bool = False, timeout_s: float = 15.0
) -> Any:
    """GET_CONSUMER_RUNNING_INFO, relayed by the broker to the client: the client's
    `ConsumerRunningInfo` as decoded JSON (its shape is the client's business)."""
    header = GetConsumerRunningInfoRequestHeader(group, client_id, jstack)
    response = await call(
        conn, RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext_fields(), timeout_s=timeout_s
    )
    return load_value(response.body or b"{}", "consumer running info")
