"""`ProducerManager`: the live connections of each producer group, from heartbeats.

The broker needs them to ask a producer of a half message's group for the state of its local
transaction (CHECK_TRANSACTION_STATE), as 4.9's `ProducerManager` keeps channels for
`Broker2Client.checkProducerTransactionState`, and to list them (GET_PRODUCER_CONNECTION_LIST:
client id, language and version of the heartbeat). A heartbeat's `producerDataSet` registers the
connection it arrived on for each group it names; a connection that closes, or is silent for
`CHANNEL_EXPIRED_S`, is forgotten. A connection counts at most `MAX_GROUPS_PER_CONNECTION`
groups, so the table is bounded by `max_connections`, never by what one peer sends.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import structlog
import trio

from protocol.codes import LanguageCode
from protocol.command import RemotingCommand

if TYPE_CHECKING:
    from broker.processors import RequestContext
    from protocol.route import HeartbeatData

#: silence after which a producer's connection is no longer asked (4.9's channelExpiredTimeout)
CHANNEL_EXPIRED_S: Final = 120.0
MAX_GROUPS_PER_CONNECTION: Final = 64

log = structlog.get_logger()


@dataclass(slots=True)
class Channel:
    conn_id: int
    remote: tuple[str, int]
    push: Callable[[RemotingCommand], bool]
    last_seen: float
    client_id: str = ""
    language: int = LanguageCode.JAVA
    version: int = 0


class ProducerManager:
    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._groups: dict[str, dict[int, Channel]] = {}
        self._by_conn: dict[int, set[str]] = {}
        self._rng = random.Random()

    async def on_heartbeat(
        self, heartbeat: HeartbeatData, ctx: RequestContext, request: RemotingCommand | None = None
    ) -> None:
        now = self._clock()
        language = request.language if request is not None else LanguageCode.JAVA
        version = request.version if request is not None else 0
        mine = self._by_conn.setdefault(ctx.conn_id, set())
        for producer in heartbeat.producer_data_set:
            group = producer.group_name
            if group not in mine and len(mine) >= MAX_GROUPS_PER_CONNECTION:
                log.warning("producer_groups_limit", groups=len(mine), ignored=group)
                continue
            mine.add(group)
            channels = self._groups.setdefault(group, {})
            if ctx.conn_id not in channels:
                log.info("producer_registered", group=group, remote=ctx.remote_text)
            channels[ctx.conn_id] = Channel(
                ctx.conn_id, ctx.remote, ctx.push, now, heartbeat.client_id, language, version
            )
        if not mine:
            del self._by_conn[ctx.conn_id]

    def register_channel(self, group: str, channel: Channel) -> None:
        """Register (or refresh) `channel` for `group` without a 4.x heartbeat: a RocketMQ 5
        session, whose `conn_id` is negative (apart from remoting connections)."""
        mine = self._by_conn.setdefault(channel.conn_id, set())
        if group not in mine and len(mine) >= MAX_GROUPS_PER_CONNECTION:
            log.warning("producer_groups_limit", groups=len(mine), ignored=group)
            return
        mine.add(group)
        self._groups.setdefault(group, {})[channel.conn_id] = channel

    def connection_closed(self, conn_id: int) -> None:
        for group in self._by_conn.pop(conn_id, ()):
            channels = self._groups.get(group, {})
            channels.pop(conn_id, None)
            if not channels:
                self._groups.pop(group, None)

    def expire(self) -> None:
        cutoff = self._clock() - CHANNEL_EXPIRED_S
        for group in list(self._groups):
            channels = self._groups[group]
            for conn_id in [c for c, ch in channels.items() if ch.last_seen < cutoff]:
                del channels[conn_id]
                self._by_conn.get(conn_id, set()).discard(group)
            if not channels:
                del self._groups[group]

    def push_to_one(self, group: str, command: RemotingCommand) -> Channel | None:
        """Queue `command` on one live connection of `group`, tried in random order; the
        channel that took it, or None when none could."""
        channels = list(self._groups.get(group, {}).values())
        self._rng.shuffle(channels)
        for channel in channels:
            if channel.push(command):
                return channel
        return None

    def channels(self, group: str) -> list[Channel]:
        """The live connections of producer group `group` (expired ones left out)."""
        cutoff = self._clock() - CHANNEL_EXPIRED_S
        return [ch for ch in self._groups.get(group, {}).values() if ch.last_seen >= cutoff]

    def group_table(self) -> Mapping[str, Mapping[int, Channel]]:
        """The live producer groups, read-only: connection id -> channel."""
        return MappingProxyType(self._groups)

    def group_count(self) -> int:
        return len(self._groups)
