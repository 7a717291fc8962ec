"""The processors of the consumer-group and connection admin codes, for the server's table."""

from __future__ import annotations

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
from broker.admin.reset_offset import ResetOffsetProcessor
from broker.processors import RequestProcessor
from protocol.codes import RequestCode


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
