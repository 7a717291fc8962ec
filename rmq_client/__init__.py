"""A Python client of RocketMQ 4.9's remoting protocol, Trio first.

The modules: `producer` (one connection, sends, routes), `pull_consumer`, `push_consumer` (a
handler called per message), `transaction`, `query`, `admin` and `admin_groups`, `blocking` and
`blocking_consumer` (the producer and a consumer from plain threads), `quick_send` (what
`rmq-broker send | health` run), and for tests `broker_process` (a broker in a subprocess) and
`pytest_plugin` (its fixtures). This package imports `protocol` and the store's record decoder,
never the daemon's `broker` package.
"""

from rmq_client.admin import AdminClient, open_admin
from rmq_client.blocking import BlockingProducer
from rmq_client.blocking_consumer import BlockingConsumer
from rmq_client.broker_process import BrokerOptions, BrokerProcess, BrokerStartError, TlsFiles
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
    "BlockingConsumer",
    "BlockingProducer",
    "BrokerOptions",
    "BrokerProcess",
    "BrokerStartError",
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
    "TlsFiles",
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
