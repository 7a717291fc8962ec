"""A slave's copy of its master's metadata (RocketMQ 4.9 `SlaveSynchronize`): every 10 s the
topic configs, the subscription groups, the committed consumer offsets and the delay levels'
offsets, read from the master's broker port with the ordinary admin requests
(GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET,
GET_ALL_DELAY_OFFSET).

Topics and groups are replaced whole by the master's (one gone from the master goes here too);
consumer offsets are taken over queue by queue, as 4.9's `putAll`. A round that fails (master
down, bad answer) is one log event and changes nothing; the next round tries again. The
master's broker address comes from `ha_master_broker_address` or, later, the registration's
answer (`update_master_address`).

The delay offsets travel as 4.9 writes its `delayOffset.json` (fastjson, level keys unquoted:
`{"offsetTable":{1:5,2:0}}`); the master answers GET_ALL_DELAY_OFFSET with
`GetAllDelayOffsetProcessor`, so that a slave later started as a master does not deliver again
what its master delivered already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.config import HostPort
from broker.consumer_offsets import TOPIC_GROUP_SEPARATOR
from broker.topic_config import TopicConfig
from protocol import fastjson
from protocol.admin_group import ConsumerOffsetWrapper, SubscriptionGroupWrapper
from protocol.admin_topic import TopicConfigSerializeWrapper
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from rmq_client.admin_groups import call
from rmq_client.producer import ConnectionClosedError, SendError, open_producer

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.processors import RequestContext
    from broker.schedule import ScheduleMessageService

log = structlog.get_logger()

#: 4.9's period (`BrokerController`: slaveSynchronize every 10 s)
SYNC_INTERVAL_S: Final = 10.0
CALL_TIMEOUT_S: Final = 5.0


class SlaveSynchronize:
    def __init__(
        self,
        broker: BrokerContext,
        master: HostPort | None,
        schedule: ScheduleMessageService | None = None,
    ) -> None:
        self.broker = broker
        #: the slave's own delay levels' offsets (it runs no delivery): saved as the master's
        self.schedule = schedule
        self.master = master
        self.rounds = 0
        self._failing = False

    def update_master_address(self, master: HostPort | None) -> None:
        self.master = master

    async def run(
        self,
        interval_s: float = SYNC_INTERVAL_S,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        while True:
            if self.master is not None:
                await self.sync_all(self.master)
            await trio.sleep(interval_s)

    async def sync_all(self, master: HostPort) -> bool:
        """One round; False (and one event per failing spell) when it failed."""
        try:
            with trio.fail_after(CALL_TIMEOUT_S * 4):
                async with open_producer(
                    master.host, master.port, timeout_s=CALL_TIMEOUT_S
                ) as conn:
                    topics = await call(conn, RequestCode.GET_ALL_TOPIC_CONFIG)
                    groups = await call(conn, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                    offsets = await call(conn, RequestCode.GET_ALL_CONSUMER_OFFSET)
                    delays = await call(conn, RequestCode.GET_ALL_DELAY_OFFSET)
            await self._apply_topics(TopicConfigSerializeWrapper.from_json(topics.body))
            await self._apply_groups(SubscriptionGroupWrapper.decode(groups.body))
            self._apply_offsets(ConsumerOffsetWrapper.decode(offsets.body))
            if self.schedule is not None:
                self.schedule.offsets = decode_delay_offsets(delays.body)
                await self.schedule.save()
        except (
            OSError,
            trio.TooSlowError,
            trio.BrokenResourceError,
            ConnectionClosedError,
            SendError,
            RemotingProtocolError,
            ValueError,
        ) as exc:
            if not self._failing:
                log.warning("slave_sync_failed", master=str(master), error=repr(exc))
            self._failing = True
            return False
        if self._failing or self.rounds == 0:
            log.info("slave_synced", master=str(master))
        self._failing = False
        self.rounds += 1
        return True

    async def _apply_topics(self, wrapper: TopicConfigSerializeWrapper) -> None:
        topics = self.broker.topics
        wanted = {
            name: TopicConfig(
                d.topic_name,
                d.read_queue_nums,
                d.write_queue_nums,
                d.perm,
                d.topic_filter_type,
                d.topic_sys_flag,
                d.order,
            )
            for name, d in wrapper.topic_config_table.items()
        }
        changed = False
        for name in set(topics.topics()) - set(wanted):
            topics.delete(name)
            changed = True
        for name, config in wanted.items():
            if topics.find(name) != config:
                topics.put(config)
                changed = True
        if changed:
            await topics.persist()

    async def _apply_groups(self, wrapper: SubscriptionGroupWrapper) -> None:
        groups = self.broker.groups
        changed = False
        for name in set(groups.table()) - set(wrapper.table):
            groups.delete(name)
            changed = True
        for name, config in wrapper.table.items():
            if groups.find(name) != config:
                groups.put(config)
                changed = True
        if changed:
            await groups.persist()

    def _apply_offsets(self, wrapper: ConsumerOffsetWrapper) -> None:
        offsets = self.broker.offsets
        for key, queues in wrapper.offset_table.items():
            topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
            if sep:
                offsets.set_offsets(group, topic, queues)


def encode_delay_offsets(offsets: dict[int, int]) -> bytes:
    return fastjson.dumps({"offsetTable": dict(sorted(offsets.items()))}).encode()


def decode_delay_offsets(body: bytes | None) -> dict[int, int]:
    """The level -> offset table of a GET_ALL_DELAY_OFFSET answer; ValueError when malformed."""
    value = fastjson.loads(body or b"")
    table = value.get("offsetTable") if isinstance(value, dict) else None
    if not isinstance(table, dict):
        raise ValueError("delay offsets: no offsetTable object")
    offsets: dict[int, int] = {}
    for level, offset in table.items():
        try:
            number = int(level)
        except (TypeError, ValueError):
            raise ValueError(f"delay offsets: level {level!r} is not a number") from None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or number < 1:
            raise ValueError(f"delay offsets: bad entry {level!r}: {offset!r}")
        offsets[number] = offset
    return offsets


class GetAllDelayOffsetProcessor:
    """GET_ALL_DELAY_OFFSET (45): the delay levels' next offsets."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        body = encode_delay_offsets(ctx.broker.admin.schedule_offsets())
        return request.make_response(ResponseCode.SUCCESS, body=body)
