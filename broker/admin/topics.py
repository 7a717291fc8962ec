"""Topic admin requests of RocketMQ 4.9's `AdminBrokerProcessor`, answered as it answers them.

UPDATE_AND_CREATE_TOPIC (17) creates or replaces a topic (persisted before the answer);
DELETE_TOPIC_IN_BROKER (215) removes it from the table; GET_ALL_TOPIC_CONFIG (21) returns the
table as `TopicConfigSerializeWrapper`; GET_TOPIC_STATS_INFO (202) the min and max offset and
last store time of each write queue. A name `TopicValidator` refuses, or a system topic (4.9's
set, the cluster, broker and reply topics, `rmq_sys_*`), is answered SYSTEM_ERROR with 4.9's
remark. Where 4.9 takes any number we refuse: queue counts outside 1..`MAX_QUEUE_NUMS` and
permissions with bits other than PRIORITY|READ|WRITE|INHERIT (SYSTEM_ERROR, the value named).

DELETE_TOPIC_IN_BROKER does what 4.9's `deleteTopic` does: the topic leaves the table, then the
store destroys its consume queues (files and directories) and drops its entries from the commit
log's topic-queue table (`DefaultMessageStore.delete_topic`, 4.9's `cleanUnusedTopic` for the
one topic: a sweep of every queue without a table entry would also take queues this broker
keeps without one). The consumer offsets of the topic go too, every group's, as RocketMQ's
later `ConsumerOffsetManager.cleanOffsetByTopic` does (4.9.7 keeps them, and a consumer then
starts past the end of the re-created queue). The records stay in the commit log, unreachable
by queue: created again, the topic starts at queue offset 0, also after a clean or a kill -9
restart (`store.deleted_topics` says how, and where 4.9 differs). A store that cannot make the
delete durable answers SYSTEM_ERROR, the topic already out of the table.
"""

from __future__ import annotations

from typing import Final

import structlog
import trio

from broker.admin import figures
from broker.config import BrokerConfig
from broker.processors import RequestContext
from broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    REPLY_TOPIC_POSTFIX,
    TopicConfig,
)
from protocol import names
from protocol.admin_topic import (
    TOPIC_FILTER_TYPES,
    CreateTopicRequestHeader,
    DataVersion,
    MessageQueue,
    TopicConfigSerializeWrapper,
    TopicOffset,
    TopicRequestHeader,
    TopicStatsTable,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from store.message_store import DefaultMessageStore

log = structlog.get_logger()

#: the most queues an admin may give a topic (the `BenchmarkTest` topic's count)
MAX_QUEUE_NUMS: Final = 1024
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"
_ALL_PERMS: Final = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT
#: TopicValidator's SYSTEM_TOPIC_SET (4.9)
SYSTEM_TOPICS: Final = NOT_ALLOWED_SEND_TOPICS | {
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    "RMQ_SYS_TRACE_TOPIC",
}


def is_system_topic(config: BrokerConfig, topic: str) -> bool:
    """`TopicValidator.isSystemTopic`, with the topics a 4.9 broker adds to the system set."""
    cluster = config.broker_cluster_name
    own = {cluster, config.broker_name, f"{cluster}_{REPLY_TOPIC_POSTFIX}"}
    return topic in SYSTEM_TOPICS or topic in own or topic.startswith(SYSTEM_TOPIC_PREFIX)


def check_admin_topic(ctx: RequestContext, topic: str) -> None:
    """`TopicValidator.validateTopic` and `isSystemTopic`, with the topics a 4.9 broker adds
    to the system set (its cluster, its broker name, the reply topic)."""
    names.check_topic_name("topic", topic)
    if is_system_topic(ctx.broker.config, topic):
        raise HeaderFieldError("topic", f"The topic[{topic}] is conflict with system topic.")


def _topic_config(header: CreateTopicRequestHeader) -> TopicConfig:
    for field, count in (
        ("readQueueNums", header.read_queue_nums),
        ("writeQueueNums", header.write_queue_nums),
    ):
        if not 1 <= count <= MAX_QUEUE_NUMS:
            raise HeaderFieldError(
                field, f"{field} {count} is out of range: a topic has 1 to {MAX_QUEUE_NUMS} queues"
            )
    if header.perm & ~_ALL_PERMS or header.perm < 0:
        raise HeaderFieldError(
            "perm",
            f"perm {header.perm} is not a permission: bits of 8 (priority), 4 (read), "
            "2 (write) and 1 (inherit)",
        )
    if header.topic_filter_type not in TOPIC_FILTER_TYPES:
        raise HeaderFieldError(
            "topicFilterType",
            f"No enum constant org.apache.rocketmq.common.TopicFilterType."
            f"{header.topic_filter_type[:64]}",
        )
    return TopicConfig(
        header.topic,
        header.read_queue_nums,
        header.write_queue_nums,
        header.perm,
        header.topic_filter_type,
        header.topic_sys_flag or 0,
        header.order,
    )


class UpdateAndCreateTopicProcessor:
    """UPDATE_AND_CREATE_TOPIC (17)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        check_admin_topic(ctx, header.topic)
        config = _topic_config(header)
        topics = ctx.broker.topics
        previous = topics.find(config.topic_name)
        topics.put(config)
        await topics.persist()
        log.info(
            "topic_updated",
            topic=config.topic_name,
            read_queues=config.read_queue_nums,
            write_queues=config.write_queue_nums,
            perm=config.perm,
            created=previous is None,
            remote=ctx.remote_text,
        )
        return request.make_response(ResponseCode.SUCCESS)


class DeleteTopicInBrokerProcessor:
    """DELETE_TOPIC_IN_BROKER (215): SUCCESS whether or not the topic was there (as 4.9)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = TopicRequestHeader.from_ext_fields(request.ext_fields)
        check_admin_topic(ctx, header.topic)
        topics = ctx.broker.topics
        offsets = ctx.broker.offsets
        store = ctx.broker.store
        # Table, queues and offsets change with no await between them: a send cannot create
        # the topic again in the middle, its queues then wiped under it.
        removed = topics.delete(header.topic)
        try:
            queues = (
                store.delete_topic(header.topic) if isinstance(store, DefaultMessageStore) else []
            )
        except OSError as exc:
            log.error("topic_delete_failed", topic=header.topic, error=str(exc))
            if removed is not None:
                await topics.persist()
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, f"deleting the queues of {header.topic} failed: {exc}"
            )
        groups = offsets.remove_topic(header.topic)
        if removed is not None:
            await topics.persist()
        if groups:
            await offsets.persist()
        log.info(
            "topic_deleted",
            topic=header.topic,
            existed=removed is not None,
            queues_removed=len(queues),
            offsets_removed_groups=len(groups),
            remote=ctx.remote_text,
        )
        return request.make_response(ResponseCode.SUCCESS)


def encode_topic_table(table: dict[str, TopicConfig], version: DataVersion) -> bytes:
    """The topic table as `TopicConfigSerializeWrapper` JSON."""
    data = {name: t.data() for name, t in table.items()}
    return TopicConfigSerializeWrapper(data, version).to_json()


class GetAllTopicConfigProcessor:
    """GET_ALL_TOPIC_CONFIG (21); a large table is encoded off the event loop."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        topics = ctx.broker.topics
        version = DataVersion(topics.data_version.counter, topics.data_version.timestamp)
        # a copy of the table; its TopicConfigs are frozen, so a thread may read them
        body = await trio.to_thread.run_sync(encode_topic_table, topics.topics(), version)
        return request.make_response(ResponseCode.SUCCESS, body=body)


def topic_stats(ctx: RequestContext, topic: TopicConfig) -> TopicStatsTable:
    """Per write queue: min and max logical offset, store time of the last message (0: none)."""
    broker = ctx.broker
    queues = figures.topic_queues(broker, topic)
    figures.read_topic_times(broker, topic.topic_name, queues)
    broker_name = broker.config.broker_name
    return TopicStatsTable(
        {
            MessageQueue(topic.topic_name, broker_name, q.queue_id): TopicOffset(
                q.min_offset, q.max_offset, q.last
            )
            for q in queues
        }
    )


class GetTopicStatsInfoProcessor:
    """GET_TOPIC_STATS_INFO (202)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = TopicRequestHeader.from_ext_fields(request.ext_fields)
        topic = ctx.broker.topics.find(header.topic)
        if topic is None:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist"
            )
        return request.make_response(ResponseCode.SUCCESS, body=topic_stats(ctx, topic).to_json())
