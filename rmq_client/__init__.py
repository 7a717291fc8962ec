"""A Python client of RocketMQ 4.9's remoting protocol, Trio first.

The modules: `producer` (one connection, sends, routes), `pull_consumer`, `push_consumer` (a
handler called per message), `transaction`, `query`, `admin` and `admin_groups`, `blocking` (the
producer from plain threads) and `quick_send` (what `rmq-broker send | health` run). This
package imports `protocol` and the store's record decoder, never the daemon's `broker` package.
"""

from rmq_client.admin import AdminClient, open_admin
from rmq_client.blocking import BlockingProducer
from rmq_client.producer import (
    DEFAULT_TIMEOUT_S,
    ConnectionClosedError,
    Message,
    Producer,
    RequestTimeoutError,
    SendError,
    SendResult,
    SendStatus,
    SessionCredentials,
    open_producer,
)
from rmq_client.pull_consumer import PullConsumer, PullResult, open_pull_consumer
from rmq_client.push_consumer import PushConsumer, ReceivedMessage, open_push_consumer
from rmq_client.query import QueryAnswer, QueryError, query_by_key, view_by_offset
from rmq_client.transaction import (
    TransactionProducer,
    TransactionState,
    open_transaction_producer,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "AdminClient",
    "BlockingProducer",
    "ConnectionClosedError",
    "Message",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PushConsumer",
    "QueryAnswer",
    "QueryError",
    "ReceivedMessage",
    "RequestTimeoutError",
    "SendError",
    "SendResult",
    "SendStatus",
    "SessionCredentials",
    "TransactionProducer",
    "TransactionState",
    "open_admin",
    "open_producer",
    "open_pull_consumer",
    "open_push_consumer",
    "open_transaction_producer",
    "query_by_key",
    "view_by_offset",
]
