"""ConsumerManager: clients of a group from heartbeats, expired after 120 s of silence."""

from __future__ import annotations

import pathlib

from broker.consumer_manager import CHANNEL_EXPIRED_S, ConsumerManager
from broker.context import BrokerContext
from broker.processors import RequestContext
from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import TopicConfigManager
from protocol.route import ConsumerData, HeartbeatData, SubscriptionData
from tests.conftest import make_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def heartbeat(client_id: str, group: str = "g") -> HeartbeatData:
    consumer = ConsumerData(
        group, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
        (SubscriptionData("T", "a || b"),),
    )  # fmt: skip
    return HeartbeatData(client_id, (), (consumer,))


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
