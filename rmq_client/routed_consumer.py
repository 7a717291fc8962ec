"""A pull consumer that finds its brokers through the name servers and picks, per broker name,
the address the way 4.9's clients do (`MQClientInstance.findBrokerAddressInSubscribe`):

- a pull goes to the broker id the last pull answer suggested for that queue
  (`suggestWhichBrokerId`; the master, id 0, at first); a suggested slave missing from the route
  gives way to the next id, and when nothing matches, to whichever address the route lists
  (lowest id first), so that when the master is gone pulls continue from the slave;
- a pull sent to a slave carries no commit offset (4.9 clears the flag: a slave's offsets are
  its master's copy);
- an offset commit or read goes to the master, or, when the route lists none, to any address.

A broker that cannot be reached fails the call with `BrokerUnreachableError` and the route is asked
for again, as 4.9 refreshes it; the caller retries (4.9 waits and pulls again).

```python
async with open_routed_consumer(["127.0.0.1:9876"], "my-group") as consumer:
    await consumer.subscribe("Orders")
    for broker_name, queue_id in await consumer.queues("Orders"):
        result = await consumer.pull("Orders", broker_name, queue_id, offset=0)
```
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import structlog
import trio

from protocol.matcher import RequestTimeoutError
from protocol.route import TopicRouteData
from rmq_client.producer import ConnectionClosedError, SendError, open_producer
from rmq_client.pull_consumer import PullConsumer, PullResult

log = structlog.get_logger()

MASTER_ID: Final = 0
_LOST = (
    ConnectionClosedError,
    OSError,
    trio.BrokenResourceError,
    trio.TooSlowError,
    RequestTimeoutError,
)


class BrokerUnreachableError(Exception):
    """No address for the broker name, or the chosen address did not answer."""


def find_subscribe_address(
    addrs: Mapping[int, str], broker_id: int, only_this_broker: bool
) -> tuple[str, bool] | None:
    """The address to use for `broker_id` among a broker name's `addrs`, and whether it is a
    slave; None when there is none (4.9's rules, see the module's docstring)."""
    if not addrs:
        return None
    found = addrs.get(broker_id)
    if found is not None:
        return found, broker_id != MASTER_ID
    if broker_id != MASTER_ID and (found := addrs.get(broker_id + 1)) is not None:
        return found, True
    if only_this_broker:
        return None
    first = min(addrs)
    return addrs[first], first != MASTER_ID


class RoutedPullConsumer:
    def __init__(
        self,
        namesrvs: Sequence[str],
        group: str,
        client_id: str,
        timeout_s: float,
        nursery: trio.Nursery,
    ) -> None:
        self.namesrvs = list(namesrvs)
        self.group = group
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.subscriptions: dict[str, str] = {}
        #: broker name -> broker id -> address, from the latest routes
        self.broker_addrs: dict[str, dict[int, str]] = {}
        #: (topic, broker name, queue id) -> the broker id the last pull answer suggested
        self.suggested: dict[tuple[str, str, int], int] = {}
        #: open connections by address: each lives in a task of `nursery` until its event is set
        self._connections: dict[str, tuple[trio.Event, PullConsumer]] = {}
        self._nursery = nursery

    async def refresh_route(self, topic: str) -> TopicRouteData:
        """Ask the name servers in turn; the first answer replaces the known addresses."""
        errors: list[str] = []
        for namesrv in self.namesrvs:
            host, port = namesrv.rsplit(":", 1)
            try:
                async with open_producer(host, int(port), timeout_s=self.timeout_s) as conn:
                    route = await conn.get_route(topic)
            except (*_LOST, SendError) as error:
                errors.append(f"{namesrv}: {error!r}")
                continue
            for data in route.broker_datas:
                self.broker_addrs[data.broker_name] = dict(data.broker_addrs)
            return route
        raise BrokerUnreachableError(f"no route for {topic}: {'; '.join(errors)}")

    async def queues(self, topic: str) -> list[tuple[str, int]]:
        route = await self.refresh_route(topic)
        return sorted(
            (data.broker_name, queue_id)
            for data in route.queue_datas
            for queue_id in range(data.read_queue_nums)
        )

    async def subscribe(self, topic: str, expression: str = "*") -> None:
        """Record the subscription; heartbeat every address the route lists (as 4.9, a consumer
        announces itself to masters and slaves); an unreachable one is skipped."""
        self.subscriptions[topic] = expression
        await self.refresh_route(topic)
        for addrs in list(self.broker_addrs.values()):
            for addr in addrs.values():
                try:
                    consumer = await self._consumer(addr)
                    consumer.subscriptions = dict(self.subscriptions)
                    await consumer.heartbeat()
                except (*_LOST, BrokerUnreachableError) as error:
                    log.info("consumer_heartbeat_skipped", addr=addr, error=repr(error))

    async def pull(
        self, topic: str, broker_name: str, queue_id: int, offset: int, **kwargs: Any
    ) -> PullResult:
        key = (topic, broker_name, queue_id)
        found = await self._find(topic, broker_name, self.suggested.get(key, MASTER_ID), False)
        addr, slave = found
        if slave:
            kwargs.pop("commit_offset", None)
        result = await self._call(topic, addr, "pull", topic, queue_id, offset, **kwargs)
        assert isinstance(result, PullResult)
        self.suggested[key] = result.suggest_which_broker_id
        return result

    async def commit(self, topic: str, broker_name: str, queue_id: int, offset: int) -> None:
        addr = await self._admin_address(topic, broker_name)
        await self._call(topic, addr, "commit", topic, queue_id, offset)

    async def committed(self, topic: str, broker_name: str, queue_id: int) -> int | None:
        addr = await self._admin_address(topic, broker_name)
        answer = await self._call(topic, addr, "committed", topic, queue_id)
        assert answer is None or isinstance(answer, int)
        return answer

    async def aclose(self) -> None:
        for addr in list(self._connections):
            await self._drop(addr)

    async def _admin_address(self, topic: str, broker_name: str) -> str:
        addrs = self.broker_addrs.get(broker_name, {})
        found = find_subscribe_address(addrs, MASTER_ID, True)
        if found is None:
            found = await self._find(topic, broker_name, MASTER_ID, False)
        return found[0]

    async def _find(
        self, topic: str, broker_name: str, broker_id: int, only_this_broker: bool
    ) -> tuple[str, bool]:
        found = find_subscribe_address(
            self.broker_addrs.get(broker_name, {}), broker_id, only_this_broker
        )
        if found is None:
            await self.refresh_route(topic)
            found = find_subscribe_address(
                self.broker_addrs.get(broker_name, {}), broker_id, only_this_broker
            )
        if found is None:
            raise BrokerUnreachableError(f"the route of {topic} lists no address for {broker_name}")
        return found

    async def _call(self, topic: str, addr: str, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            consumer = await self._consumer(addr)
            return await getattr(consumer, method)(*args, **kwargs)
        except _LOST as error:
            await self._drop(addr)
            try:
                await self.refresh_route(topic)
            except BrokerUnreachableError as no_route:
                log.info("consumer_route_refresh_failed", topic=topic, error=str(no_route))
            raise BrokerUnreachableError(f"{addr}: {error!r}") from error

    async def _consumer(self, addr: str) -> PullConsumer:
        if addr not in self._connections:
            done = trio.Event()
            consumer: PullConsumer = await self._nursery.start(self._hold, addr, done)
            self._connections[addr] = (done, consumer)
        return self._connections[addr][1]

    async def _hold(
        self, addr: str, done: trio.Event, *, task_status: trio.TaskStatus[PullConsumer]
    ) -> None:
        """Keep one connection open until `done`; its loss ends only this task."""
        host, port = addr.rsplit(":", 1)
        started = False
        try:
            async with open_producer(host, int(port), timeout_s=self.timeout_s) as connection:
                consumer = PullConsumer(connection, self.group, self.client_id)
                consumer.subscriptions = dict(self.subscriptions)
                task_status.started(consumer)
                started = True
                await done.wait()
        except Exception as error:  # a connection's end, however it ends, is only its own
            if not started:
                raise  # not connected: the caller's call fails
            log.info("consumer_connection_lost", addr=addr, error=repr(error))

    async def _drop(self, addr: str) -> None:
        entry = self._connections.pop(addr, None)
        if entry is not None:
            entry[0].set()


@asynccontextmanager
async def open_routed_consumer(
    namesrvs: Sequence[str],
    group: str,
    *,
    client_id: str = "python-routed@0",
    timeout_s: float = 5.0,
) -> AsyncIterator[RoutedPullConsumer]:
    async with trio.open_nursery() as nursery:
        consumer = RoutedPullConsumer(namesrvs, group, client_id, timeout_s, nursery)
        try:
            yield consumer
        finally:
            await consumer.aclose()
