"""ConsumerManager: clients of a group from heartbeats, expired after 120 s of silence."""

from __future__ import annotations

import pathlib

from broker.consumer_manager import CHANNEL_EXPIRED_S, ConsumerManager
from broker.context import BrokerContext
from broker.processors import RequestContext
from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.route import ConsumerData, HeartbeatData, SubscriptionData
from tests.conftest import make_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def heartbeat(client_id: str, group: str = "g", *topics: str) -> HeartbeatData:
    subscriptions = tuple(SubscriptionData(t, "a || b") for t in topics or ("T",))
    consumer = ConsumerData(
        group, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", subscriptions
    )
    return HeartbeatData(client_id, (), (consumer,))


def context(tmp_path: pathlib.Path) -> RequestContext:
    config = make_config(tmp_path / "store")
    groups = SubscriptionGroupManager(None)
    topics = TopicConfigManager(None, cluster_name="c", broker_name="b")
    broker = BrokerContext(config, None, topics, groups, ("127.0.0.1", 1))  # type: ignore[arg-type]
    return RequestContext(broker, 1, ("127.0.0.1", 5000))


async def test_silent_clients_expire_and_subscriptions_are_kept(tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path / "store")
    groups = SubscriptionGroupManager(None)
    groups.ensure("g")
    topics = TopicConfigManager(None, cluster_name="c", broker_name="b")
    broker = BrokerContext(config, None, topics, groups, ("127.0.0.1", 1))  # type: ignore[arg-type]
    ctx = RequestContext(broker, 1, ("127.0.0.1", 5000))
    clock = Clock()
    manager = ConsumerManager(clock)
    await manager.on_heartbeat(heartbeat("old"), ctx)
    clock.now += CHANNEL_EXPIRED_S / 2
    await manager.on_heartbeat(heartbeat("new"), ctx)
    assert manager.client_ids("g") == ["new", "old"]
    clock.now += CHANNEL_EXPIRED_S / 2 + 1  # "old" silent for longer than the expiry
    assert manager.client_ids("g") == ["new"]
    subscription = manager.subscription("g", "T")
    assert subscription is not None and subscription.sub_string == "a || b"
    assert topics.find("%RETRY%g") is not None
    manager.unregister("new", None)
    assert manager.client_ids("g") == []


async def test_a_group_has_the_subscriptions_of_its_latest_heartbeat(
    tmp_path: pathlib.Path,
) -> None:
    ctx = context(tmp_path)
    manager = ConsumerManager(Clock())
    for n in range(100):  # a client naming a new topic in every heartbeat
        await manager.on_heartbeat(heartbeat("c", "g", f"T{n}", "Kept"), ctx)
    assert manager.subscription("g", "T98") is None
    assert manager.subscription("g", "T99") is not None
    assert manager.subscription("g", "Kept") is not None
    assert len(manager._groups["g"].subscriptions) == 2


async def test_a_closed_connection_takes_its_clients_and_empty_groups_go(
    tmp_path: pathlib.Path,
) -> None:
    ctx = context(tmp_path)
    other = RequestContext(ctx.broker, 2, ("127.0.0.1", 5001))
    clock = Clock()
    manager = ConsumerManager(clock)
    for index in range(50):  # one peer naming many groups
        await manager.on_heartbeat(heartbeat("peer@1", f"group{index}"), ctx)
    await manager.on_heartbeat(heartbeat("keep@2", "group0"), other)
    assert manager.group_count == 50
    manager.connection_closed(1)
    assert manager.group_count == 1
    assert manager.client_ids("group0") == ["keep@2"]
    assert manager.subscription("group1", "T") is None  # gone with its last client
    clock.now += CHANNEL_EXPIRED_S + 1
    manager.expire()
    assert manager.group_count == 0 and manager.client_ids("group0") == []


async def test_members_are_told_when_their_group_changes(tmp_path: pathlib.Path) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED (oneway, the group in its header) to every member left when
    one joins, unregisters or its connection closes; a heartbeat of a known member: nothing."""
    base = context(tmp_path)
    pushed: dict[int, list[RemotingCommand]] = {1: [], 2: []}

    def member(conn_id: int) -> RequestContext:
        def push(command: RemotingCommand) -> bool:
            pushed[conn_id].append(command)
            return True

        return RequestContext(base.broker, conn_id, ("127.0.0.1", 5000 + conn_id), push)

    def told() -> dict[int, list[str]]:
        result = {
            c: [f"{cmd.code}:{cmd.ext_fields['consumerGroup']}" for cmd in cmds if cmd.is_oneway]
            for c, cmds in pushed.items()
        }
        for commands in pushed.values():
            commands.clear()
        return result

    change = f"{RequestCode.NOTIFY_CONSUMER_IDS_CHANGED}:g"
    manager = ConsumerManager(Clock())
    await manager.on_heartbeat(heartbeat("one"), member(1))
    assert told() == {1: [change], 2: []}
    await manager.on_heartbeat(heartbeat("two"), member(2))
    assert told() == {1: [change], 2: [change]}
    await manager.on_heartbeat(heartbeat("one"), member(1))
    assert told() == {1: [], 2: []}
    manager.connection_closed(2)
    assert told() == {1: [change], 2: []}
    await manager.on_heartbeat(heartbeat("two"), member(2))
    told()
    manager.unregister("one", "g")
    assert told() == {1: [], 2: [change]}


async def test_a_closed_connection_whose_client_moved_away_tells_nobody(
    tmp_path: pathlib.Path,
) -> None:
    """A client that re-registered on a new connection stays when its old one closes: the
    group did not change, so no member is told (a needless rebalance of every member)."""
    base = context(tmp_path)
    pushed: list[RemotingCommand] = []

    def on(conn_id: int) -> RequestContext:
        def push(command: RemotingCommand) -> bool:
            pushed.append(command)
            return True

        return RequestContext(base.broker, conn_id, ("127.0.0.1", 5000 + conn_id), push)

    manager = ConsumerManager(Clock())
    await manager.on_heartbeat(heartbeat("one"), on(1))
    await manager.on_heartbeat(heartbeat("two"), on(2))
    await manager.on_heartbeat(heartbeat("one"), on(3))  # "one" reconnected
    pushed.clear()
    manager.connection_closed(1)
    assert manager.client_ids("g") == ["one", "two"]
    assert pushed == []
    manager.connection_closed(3)
    assert manager.client_ids("g") == ["two"]
    assert [c.code for c in pushed] == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
