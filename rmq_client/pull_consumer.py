"""A simple pull consumer for tests and scripts, over the producer stub's connection.

```python
async with open_pull_consumer("127.0.0.1", 10911, "my-group") as consumer:
    await consumer.subscribe("Orders", "TagA || TagB")  # a heartbeat with the subscription
    result = await consumer.pull("Orders", queue_id=0, offset=0, suspend_ms=5000)
    for record in result.records:
        print(record.queue_offset, record.body)
    await consumer.commit("Orders", 0, result.next_begin_offset)
```

Records are decoded with the store's own decoder (`store.decode.decode_copied_records`); bodies the
client compressed stay compressed (`sys_flag` says so), as the official clients receive them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetByTimestampRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.route import ConsumerData, ConsumerListBody, HeartbeatData, SubscriptionData
from rmq_client.producer import Producer, SendError, open_producer
from store.decode import CommitLogRecord, decode_copied_records

#: what the broker holds a pull at most is the client's concern too: wait a little longer
CLIENT_SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class PullResult:
    """`code` is SUCCESS (records found), PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY (none
    matched the filter) or PULL_OFFSET_MOVED (use `next_begin_offset`)."""

    code: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[CommitLogRecord] = field(default_factory=list)
    #: the broker id the broker suggests for this queue's next pull (0: the master)
    suggest_which_broker_id: int = 0

    @property
    def found(self) -> bool:
        return self.code == ResponseCode.SUCCESS


class PullConsumer:
    def __init__(self, connection: Producer, group: str, client_id: str) -> None:
        self.connection = connection
        self.group = group
        self.client_id = client_id
        self.subscriptions: dict[str, str] = {}
        #: topic -> the expression type of its subscription (TAG or SQL92)
        self.expression_types: dict[str, str] = {}

    async def subscribe(
        self, topic: str, expression: str = "*", expression_type: str = "TAG"
    ) -> None:
        """Record the subscription and announce it to the broker (a heartbeat)."""
        self.subscriptions[topic] = expression
        self.expression_types[topic] = expression_type
        await self.heartbeat()

    async def heartbeat(self) -> None:
        consumer = ConsumerData(
            self.group,
            "CONSUME_ACTIVELY",
            "CLUSTERING",
            "CONSUME_FROM_FIRST_OFFSET",
            tuple(
                SubscriptionData(t, e, expression_type=self.expression_types.get(t, "TAG"))
                for t, e in sorted(self.subscriptions.items())
            ),
        )
        body = HeartbeatData(self.client_id, (), (consumer,)).to_json()
        await self._call(RequestCode.HEART_BEAT, {}, body=body)

    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_nums: int = 32,
        expression: str | None = None,
        expression_type: str = "TAG",
        suspend_ms: int = 0,
        commit_offset: int | None = None,
    ) -> PullResult:
        """One pull; with `suspend_ms` the broker holds it until a message arrives."""
        sys_flag = FLAG_SUSPEND if suspend_ms > 0 else 0
        if expression is not None:
            sys_flag |= FLAG_SUBSCRIPTION
        if commit_offset is not None:
            sys_flag |= FLAG_COMMIT_OFFSET
        header = PullMessageRequestHeader(
            self.group,
            topic,
            queue_id,
            offset,
            max_nums,
            sys_flag,
            commit_offset if commit_offset is not None else 0,
            suspend_ms,
            0,
            expression,
            expression_type if expression is not None else None,
        )
        command = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
        response = await self.connection.request(command, suspend_ms / 1000 + CLIENT_SLACK_S)
        if response.code not in _PULL_CODES:
            raise SendError(response.code, response.remark)
        bounds = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
        return PullResult(
            response.code,
            bounds.next_begin_offset,
            bounds.min_offset,
            bounds.max_offset,
            decode_copied_records(response.body or b""),
            bounds.suggest_which_broker_id,
        )

    async def commit(self, topic: str, queue_id: int, offset: int) -> None:
        header = UpdateConsumerOffsetRequestHeader(self.group, topic, queue_id, offset)
        await self._call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())

    async def committed(self, topic: str, queue_id: int) -> int | None:
        """The group's committed offset, or None when the broker has none."""
        header = QueryConsumerOffsetRequestHeader(self.group, topic, queue_id)
        command = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext_fields())
        response = await self.connection.request(command)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise SendError(response.code, response.remark)
        return int(response.ext_fields["offset"])

    async def max_offset(self, topic: str, queue_id: int) -> int:
        header = GetMaxOffsetRequestHeader(topic, queue_id)
        response = await self._call(RequestCode.GET_MAX_OFFSET, header.to_ext_fields())
        return int(response.ext_fields["offset"])

    async def min_offset(self, topic: str, queue_id: int) -> int:
        header = GetMinOffsetRequestHeader(topic, queue_id)
        response = await self._call(RequestCode.GET_MIN_OFFSET, header.to_ext_fields())
        return int(response.ext_fields["offset"])

    async def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        header = SearchOffsetByTimestampRequestHeader(topic, queue_id, timestamp_ms)
        response = await self._call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header.to_ext_fields())
        return int(response.ext_fields["offset"])

    async def consumer_ids(self) -> list[str]:
        header = GetConsumerListByGroupRequestHeader(self.group)
        response = await self._call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, header.to_ext_fields())
        return list(ConsumerListBody.from_json(response.body or b"{}").consumer_id_list)

    async def _call(
        self, code: int, ext_fields: dict[str, str], body: bytes | None = None
    ) -> RemotingCommand:
        response = await self.connection.request(RemotingCommand.request(code, ext_fields, body))
        if response.code != ResponseCode.SUCCESS:
            raise SendError(response.code, response.remark)
        return response


_PULL_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    }
)


@asynccontextmanager
async def open_pull_consumer(
    host: str, port: int, group: str, *, client_id: str = "python-pull@0", **kwargs: Any
) -> AsyncIterator[PullConsumer]:
    """Connect (the same options as `open_producer`); closed when the block ends."""
    async with open_producer(host, port, **kwargs) as connection:
        yield PullConsumer(connection, group, client_id)
