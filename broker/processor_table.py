"""The processor tables: which processor answers each request code, on the broker port and on
the name-server port. A request code is answered by exactly one processor."""

from __future__ import annotations

from broker.admin import registry as admin_registry
from broker.processors import RequestProcessor
from broker.processors.admin import DeleteExpiredCommitLogProcessor
from broker.processors.consumer import (
    CheckClientConfigProcessor,
    GetConsumerListByGroupProcessor,
    GetMaxOffsetProcessor,
    GetMinOffsetProcessor,
    QueryConsumerOffsetProcessor,
    SearchOffsetByTimestampProcessor,
    UpdateConsumerOffsetProcessor,
)
from broker.processors.end_transaction import EndTransactionProcessor
from broker.processors.lock import LockBatchMqProcessor, UnlockBatchMqProcessor
from broker.processors.namesrv import (
    GetBrokerClusterInfoProcessor,
    GetRouteInfoProcessor,
    HeartbeatProcessor,
    PeerRegistrationProcessor,
    UnregisterClientProcessor,
)
from broker.processors.pop import (
    AckMessageProcessor,
    ChangeInvisibleTimeProcessor,
    PopMessageProcessor,
)
from broker.processors.pull import PullMessageProcessor
from broker.processors.query import QueryMessageProcessor, ViewMessageByIdProcessor
from broker.processors.send import SendMessageProcessor
from broker.processors.send_back import ConsumerSendMsgBackProcessor
from protocol.codes import RequestCode


def namesrv_processors() -> dict[int, RequestProcessor]:
    """What the name-server role answers (also on the extra name-server port)."""
    peers = PeerRegistrationProcessor()
    return {
        RequestCode.REGISTER_BROKER: peers,
        RequestCode.UNREGISTER_BROKER: peers,
        RequestCode.QUERY_DATA_VERSION: peers,
        RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoProcessor(),
        RequestCode.GET_BROKER_CLUSTER_INFO: GetBrokerClusterInfoProcessor(),
        RequestCode.HEART_BEAT: HeartbeatProcessor(),
        RequestCode.UNREGISTER_CLIENT: UnregisterClientProcessor(),
        **admin_registry.namesrv_admin_processors(),
    }


def broker_processors() -> dict[int, RequestProcessor]:
    """The processor table of the broker port: request code -> processor."""
    send = SendMessageProcessor()
    table: dict[int, RequestProcessor] = {
        RequestCode.SEND_MESSAGE: send,
        RequestCode.SEND_MESSAGE_V2: send,
        RequestCode.SEND_BATCH_MESSAGE: send,
    }
    table.update(
        {
            RequestCode.PULL_MESSAGE: PullMessageProcessor(),
            RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetProcessor(),
            RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetProcessor(),
            RequestCode.GET_MAX_OFFSET: GetMaxOffsetProcessor(),
            RequestCode.GET_MIN_OFFSET: GetMinOffsetProcessor(),
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetByTimestampProcessor(),
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupProcessor(),
            RequestCode.CHECK_CLIENT_CONFIG: CheckClientConfigProcessor(),
            RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackProcessor(),
            RequestCode.TRIGGER_DELETE_FILES: DeleteExpiredCommitLogProcessor(),
            RequestCode.END_TRANSACTION: EndTransactionProcessor(),
            RequestCode.LOCK_BATCH_MQ: LockBatchMqProcessor(),
            RequestCode.UNLOCK_BATCH_MQ: UnlockBatchMqProcessor(),
            RequestCode.QUERY_MESSAGE: QueryMessageProcessor(),
            RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageByIdProcessor(),
            RequestCode.POP_MESSAGE: PopMessageProcessor(),
            RequestCode.ACK_MESSAGE: AckMessageProcessor(),
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeProcessor(),
        }
    )
    table.update(admin_registry.broker_admin_processors())
    table.update(admin_registry.group_processors())
    table.update(namesrv_processors())
    return table
