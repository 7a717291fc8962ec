"""The figures the admin requests answer, computed once for them and for the dashboard.

GET_TOPIC_STATS_INFO (202) and the dashboard's topic documents read a topic's queues through
`topic_queues`; GET_CONSUME_STATS (208) and the dashboard's group documents read a group's
queues through `group_topics` and `group_queues`; the rates come from the admin state's
sampler (`RuntimeStats.key_rates`, taken once per answer or document) through `consume_tps`
and `send_tps`. The admin
processors encode the figures in 4.9's bodies, the dashboard in its JSON.

A store time costs two file reads (the consume-queue unit, then the record), so the offsets
come without it and `read_topic_times` / `read_consumed_times` fill it in for the queues a
caller shows (the admin bodies: all of them). Every function here runs on the event loop and
reads, never changes, the broker's tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.admin.state import KeyRates
from broker.topic_config import TopicConfig

if TYPE_CHECKING:
    from broker.context import BrokerContext


@dataclass(slots=True)
class TopicQueue:
    """One queue of a topic: its min and max logical offset, the store time of its last
    message (0: none, or not read)."""

    queue_id: int
    min_offset: int
    max_offset: int
    last: int = 0


@dataclass(slots=True)
class GroupQueue:
    """One queue a group consumes: the queue's end (broker offset), the group's committed
    offset (0 before any commit) and the store time of the last message it consumed (0: none,
    or not read)."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


def topic_queues(broker: BrokerContext, config: TopicConfig) -> list[TopicQueue]:
    """The topic's write queues (those GET_TOPIC_STATS_INFO counts), without store times."""
    consume = broker.consume
    name = config.topic_name
    queues = []
    for queue_id in range(config.write_queue_nums):
        low = high = 0
        if consume is not None:
            low = max(0, consume.min_offset_in_queue(name, queue_id))
            high = max(0, consume.max_offset_in_queue(name, queue_id))
        queues.append(TopicQueue(queue_id, low, high))
    return queues


def read_topic_times(broker: BrokerContext, topic: str, queues: Iterable[TopicQueue]) -> None:
    """Fill in the store time of each queue's last message."""
    consume = broker.consume
    if consume is None:
        return
    for queue in queues:
        if queue.max_offset > 0:
            at = consume.store_timestamp_at(topic, queue.queue_id, queue.max_offset - 1)
            queue.last = at or 0


def group_topics(
    broker: BrokerContext, group: str, topic: str | None = None, *, uncommitted: bool = False
) -> list[str]:
    """The topics GET_CONSUME_STATS reports for `group`: `topic` if given, else those it
    committed offsets in, and with `uncommitted` those its live clients subscribe to as well
    (a group that has not committed yet already has a lag). A topic the broker does not have
    is left out, and so is one an online group no longer subscribes to (as 4.9 does)."""
    info = broker.consumers.group_info(group)
    subscribed = set(info.subscriptions) if info is not None else set()
    if topic and topic.strip():
        names = {topic}
    else:
        names = set(broker.offsets.topics_of(group))
        if uncommitted:
            names |= subscribed
    return sorted(
        name
        for name in names
        if broker.topics.find(name) is not None and (not subscribed or name in subscribed)
    )


def group_queues(broker: BrokerContext, group: str, topics: Iterable[str]) -> list[GroupQueue]:
    """Each readable queue of `topics` with `group`'s progress in it, without store times."""
    consume = broker.consume
    rows = []
    for topic in topics:
        config = broker.topics.find(topic)
        if config is None:
            continue
        for queue_id in range(config.read_queue_nums):
            end = consume.max_offset_in_queue(topic, queue_id) if consume is not None else 0
            committed = broker.offsets.query(group, topic, queue_id) or 0
            rows.append(GroupQueue(topic, queue_id, max(0, end), max(0, committed)))
    return rows


def read_consumed_times(broker: BrokerContext, rows: Iterable[GroupQueue]) -> None:
    """Fill in the store time of the last message each row's group consumed."""
    consume = broker.consume
    if consume is None:
        return
    for row in rows:
        if row.consumer_offset > 0:
            at = consume.store_timestamp_at(row.topic, row.queue_id, row.consumer_offset - 1)
            row.last = max(0, at or 0)


def consume_tps(broker: BrokerContext, rates: KeyRates, group: str, topics: Iterable[str]) -> float:
    """Messages per second `group` consumed of `topics` (its committed offsets' advance)."""
    return sum(rates.consume_tps(broker.offsets.key(topic, group)) for topic in topics)


def send_tps(rates: KeyRates, topics: Iterable[str]) -> float:
    """Messages per second stored in `topics`."""
    return sum(rates.topic_tps(topic) for topic in topics)
