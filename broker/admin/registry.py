"""Which processor answers which admin code, and what the admin requests need started.

`broker_admin_processors()` (topics, the broker), `group_processors()` (consumer groups,
offsets, connections) and `namesrv_admin_processors()` are merged into the server's tables
(`broker.server`, `broker.processor_table`); `saved_config` lays saved configuration changes
over the starting one; `start(broker, nursery)` wires the runtime figures to the metrics and
the offset table and starts the TPS sampler.
"""

from __future__ import annotations

import trio

from broker.admin.broker_info import (
    GetBrokerConfigProcessor,
    GetBrokerRuntimeInfoProcessor,
    UpdateBrokerConfigProcessor,
)
from broker.admin.connections import (
    GetConsumerConnectionListProcessor,
    GetConsumerRunningInfoProcessor,
    GetProducerConnectionListProcessor,
)
from broker.admin.groups import (
    DeleteSubscriptionGroupProcessor,
    GetAllConsumerOffsetProcessor,
    GetAllSubscriptionGroupProcessor,
    GetConsumeStatsProcessor,
    QueryTopicConsumeByWhoProcessor,
    UpdateSubscriptionGroupProcessor,
)
from broker.admin.namesrv_admin import (
    DeleteTopicInNamesrvProcessor,
    GetAllTopicListProcessor,
    GetTopicsByClusterProcessor,
    WritePermOfBrokerProcessor,
)
from broker.admin.reset_offset import ResetOffsetProcessor
from broker.admin.runtime_config import apply_saved, read_saved, runtime_file
from broker.admin.topics import (
    DeleteTopicInBrokerProcessor,
    GetAllTopicConfigProcessor,
    GetTopicStatsInfoProcessor,
    UpdateAndCreateTopicProcessor,
)
from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.ha.slave_sync import GetAllDelayOffsetProcessor
from broker.processors import RequestProcessor
from broker.schedule import ScheduleMessageService
from protocol.codes import RequestCode


def broker_admin_processors() -> dict[int, RequestProcessor]:
    """Topic and broker admin codes (4.9's `AdminBrokerProcessor`)."""
    return {
        RequestCode.UPDATE_AND_CREATE_TOPIC: UpdateAndCreateTopicProcessor(),
        RequestCode.DELETE_TOPIC_IN_BROKER: DeleteTopicInBrokerProcessor(),
        RequestCode.GET_ALL_TOPIC_CONFIG: GetAllTopicConfigProcessor(),
        RequestCode.GET_TOPIC_STATS_INFO: GetTopicStatsInfoProcessor(),
        RequestCode.GET_BROKER_RUNTIME_INFO: GetBrokerRuntimeInfoProcessor(),
        RequestCode.GET_BROKER_CONFIG: GetBrokerConfigProcessor(),
        RequestCode.UPDATE_BROKER_CONFIG: UpdateBrokerConfigProcessor(),
        RequestCode.GET_ALL_DELAY_OFFSET: GetAllDelayOffsetProcessor(),
    }


def group_processors() -> dict[int, RequestProcessor]:
    """Request code -> processor of every consumer-group and connection admin request."""
    return {
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: UpdateSubscriptionGroupProcessor(),
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: GetAllSubscriptionGroupProcessor(),
        RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupProcessor(),
        RequestCode.GET_CONSUME_STATS: GetConsumeStatsProcessor(),
        RequestCode.GET_ALL_CONSUMER_OFFSET: GetAllConsumerOffsetProcessor(),
        RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: QueryTopicConsumeByWhoProcessor(),
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetProcessor(),
        RequestCode.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListProcessor(),
        RequestCode.GET_PRODUCER_CONNECTION_LIST: GetProducerConnectionListProcessor(),
        RequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoProcessor(),
    }


def namesrv_admin_processors() -> dict[int, RequestProcessor]:
    """Admin codes of the name-server role (4.9's `DefaultRequestProcessor`)."""
    write_perm = WritePermOfBrokerProcessor()
    return {
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: GetAllTopicListProcessor(),
        RequestCode.GET_TOPICS_BY_CLUSTER: GetTopicsByClusterProcessor(),
        RequestCode.DELETE_TOPIC_IN_NAMESRV: DeleteTopicInNamesrvProcessor(),
        RequestCode.WIPE_WRITE_PERM_OF_BROKER: write_perm,
        RequestCode.ADD_WRITE_PERM_OF_BROKER: write_perm,
    }


def saved_config(config: BrokerConfig) -> BrokerConfig:
    """`config` with the run-time changes UPDATE_BROKER_CONFIG saved laid over it."""
    return apply_saved(config)[0]


async def start(
    broker: BrokerContext, nursery: trio.Nursery, schedule: ScheduleMessageService
) -> None:
    """Take the saved configuration's data version, count stored messages from the metrics,
    read the delay levels' progress from `schedule` and sample the TPS figures (the broker's,
    each topic's sends, each group's consumption) from now on."""
    broker.admin.schedule_offsets = lambda: dict(schedule.offsets)
    broker.admin.config_version.counter = read_saved(runtime_file(broker.config))[1]
    stats = broker.admin.stats
    if broker.metrics is not None:
        stats.puts = broker.metrics.stored_messages
        stats.topic_puts = broker.metrics.stored_by_topic
    stats.consumed = lambda: broker.offsets.consumed
    await nursery.start(broker.admin.stats.run)
