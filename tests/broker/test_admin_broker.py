"""Broker admin requests over real sockets: the runtime figures of a broker with traffic, its
configuration, a run-time change that takes effect at once and survives a restart of a real
broker process, refused changes, and the ACL: admin requests only for an admin account."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Awaitable, Callable

import pytest
import trio

from broker.admin.state import KEY_WINDOW_S, RuntimeStats
from broker.consumer_offsets import ConsumerOffsetManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.admin import AdminClient, open_admin
from rmq_client.producer import Message, SendError, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from store.message_store import DefaultMessageStore
from tests.broker.admin_acl import ADMIN, PLAIN, start_acl_broker
from tests.conftest import RunningBroker, make_config, start_broker
from tests.daemon import Daemon, serve_refused

TOPIC = "Figures"


async def traffic(port: int, messages: int, pulled: int) -> int:
    """Send `messages` to queue 0, pull `pulled` of them as a group; the first store time."""
    async with open_producer("127.0.0.1", port) as producer:
        for _ in range(messages):
            await producer.send(Message(TOPIC, b"z" * 100, queue_id=0))
    async with open_pull_consumer("127.0.0.1", port, "figures_group") as consumer:
        await consumer.subscribe(TOPIC)
        # visible once dispatched (with write buffers, once committed): held until then
        with trio.fail_after(10):
            result = await consumer.pull(TOPIC, 0, 0, max_nums=pulled, suspend_ms=5_000)
            while len(result.records) < pulled:
                result = await consumer.pull(TOPIC, 0, 0, max_nums=pulled, suspend_ms=200)
        assert len(result.records) == pulled
        await consumer.pull(TOPIC, 0, messages)  # a pull that finds nothing
        await consumer.commit(TOPIC, 0, pulled)
        return result.records[0].store_timestamp


async def test_runtime_info_of_a_broker_with_traffic(broker: RunningBroker) -> None:
    first_stored = await traffic(broker.port, 7, 3)
    async with open_producer("127.0.0.1", broker.port) as producer:
        await producer.send_batch([Message(TOPIC, b"b", queue_id=1)] * 3)
        await producer.send(Message(TOPIC, b"later", delay_level=4))  # due in 30 s
    store = broker.server.broker.store
    assert isinstance(store, DefaultMessageStore)
    async with open_admin("127.0.0.1", broker.port) as admin:
        info = await admin.runtime_info()
        with trio.fail_after(20):  # the schedule service's next round sees the delayed one
            while info.get("scheduleMessageOffset_4") != "0,1":
                await trio.sleep(0.05)
                info = await admin.runtime_info()
    assert info["scheduleMessageOffset_1"] == "0,0"
    assert (info["brokerVersion"], info["brokerVersionDesc"]) == ("407", "V4_9_7")
    assert info["commitLogMaxOffset"] == str(store.max_offset) != "0"
    assert info["commitLogMinOffset"] == "0"
    # a batch of 3 counts 3, as 4.9 counts it; the delayed message is stored once
    assert info["msgPutTotalTodayNow"] == "11"
    assert info["msgGetTotalTodayNow"] == "3"
    assert info["putMessageTimesTotal"] == "11"
    assert info["putMessageFailedTimes"] == "0"
    assert int(info["putMessageSizeTotal"]) == store.max_offset
    assert info["earliestMessageTimeStamp"] == str(first_stored)
    assert info["pageCacheLockTimeMills"] == "0"
    assert info["dispatchBehindBytes"] == "0"
    assert info["startAcceptSendRequestTimeStamp"] == "0"
    assert info["remainTransientStoreBufferNumbs"] == str(2**31 - 1)  # no write buffers
    assert info["remainHowManyDataToFlush"].endswith("B")
    assert 0 < float(info["commitLogDiskRatio"]) <= 1
    assert 0 < float(info["consumeQueueDiskRatio"]) <= 1
    assert info["commitLogDirCapacity"].startswith("Total : ")
    assert int(info["bootTimestamp"]) <= int(time.time() * 1000)
    assert info["runtime"].startswith("[ 0 days, 0 hours, ")
    # fewer than 11 samples yet: no window is covered, as 4.9 answers then
    assert info["putTps"] == "  "


def test_tps_windows_from_samples() -> None:
    puts = iter(range(0, 10_000, 20))
    stats = RuntimeStats(lambda: next(puts))
    for second in range(12):
        stats.record_get(2)
        stats.record_get(0)
        stats.sample(now=float(second))
    # 20 puts a second; one found and one missed pull a second, two messages each found one
    assert stats.tps(lambda s: s.puts) == "20.0  "
    assert stats.tps(lambda s: s.get_found + s.get_miss) == "2.0  "
    assert stats.tps(lambda s: s.transferred) == "2.0  "
    assert stats.total_tps(10) == 2.0


def test_topic_and_group_rates_from_the_same_samples() -> None:
    now = [0.0]
    sent: dict[str, int] = {}
    consumed: dict[str, int] = {}
    stats = RuntimeStats(topic_puts=lambda: sent, consumed=lambda: consumed, clock=lambda: now[0])
    assert (stats.topic_tps("T"), stats.consume_tps("T@g")) == (0.0, 0.0)  # no sample yet
    for second in range(KEY_WINDOW_S + 5):
        now[0] = float(second)
        sent["T"] = 30 * second  # 30 a second, all along
        consumed["T@g"] = 10 * min(second, 20)  # 10 a second, then none after 20 s
        stats.sample()
    now[0] += 0.5  # half a second after the last sample, 60 more sent since it
    sent["T"] += 60
    # the 10 s window opens at the sample 9.5 s back; the count now closes it
    assert stats.topic_tps("T", 10) == (30 * 9 + 60) / 9.5
    assert stats.consume_tps("T@g", 10) == 0.0
    # a minute back the group still consumed: 10 a second for the first 15.5 s of it
    assert stats.consume_tps("T@g") == 10 * (20 - 5) / 59.5
    assert stats.topic_tps("Unknown") == 0.0
    # a sample just taken does not make a spike: a second at least
    fresh = RuntimeStats(topic_puts=lambda: sent, clock=lambda: now[0])
    fresh.sample()
    sent["T"] += 5
    assert fresh.topic_tps("T") == 5.0


def test_consumed_counts_are_commits_advance() -> None:
    offsets = ConsumerOffsetManager(None)
    offsets.commit("g", "T", 0, 3)  # a first commit: where the group starts, not consumption
    offsets.commit("g", "T", 0, 8)
    offsets.commit("g", "T", 1, 0)
    offsets.commit("g", "T", 1, 2)
    offsets.commit("g", "T", 0, 4)  # an explicit commit backwards (a reset) counts nothing
    offsets.set_offsets("g", "T", {0: 20})
    assert offsets.consumed == {"T@g": 7}
    offsets.remove_group("g")
    assert offsets.consumed == {}


async def test_broker_config_lists_keys_but_no_secret(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", tls_server_key_password="hunter2")
    broker = await start_broker(nursery, config)
    async with open_admin("127.0.0.1", broker.port) as admin:
        values, version = await admin.broker_config()
    assert values["brokerName"] == "broker-a"
    assert values["brokerClusterName"] == "DefaultCluster"
    assert values["brokerPermission"] == "6"
    assert values["flushDiskType"] == "ASYNC_FLUSH"
    assert values["autoCreateTopicEnable"] == "true"
    assert values["storePathRootDir"] == str(tmp_path / "store")
    assert "tlsServerKeyPassword" not in values
    assert "hunter2" not in str(values)
    assert version["counter"] == 0
    await broker.stop()


async def change(admin: AdminClient, body: bytes) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body)
    return await admin.connection.request(request)


@pytest.mark.parametrize(
    ("body", "remark"),
    [
        (b"brokerName=other\n", "brokerName cannot change while the broker runs"),
        (b"traceOn=false\nlisten=127.0.0.1:1\n", "listen cannot change while the broker runs"),
        (b"maxMessageSize=1024\n", "maxMessageSize cannot change while the broker runs"),
        (b"noSuchKey=1\n", "unknown configuration key noSuchKey"),
        (b"brokerPermission=9\n", "broker_permission: must be within 0..7"),
        (b"maxConnections=many\n", "maxConnections: max_connections: expected an integer"),
        (b"traceOn=false\n=3\n", "properties line 2 has no key"),
    ],
)
async def test_refused_changes_change_nothing(
    broker: RunningBroker, body: bytes, remark: str
) -> None:
    async with open_admin("127.0.0.1", broker.port) as admin:
        before, _ = await admin.broker_config()
        response = await change(admin, body)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert remark in (response.remark or "")
        after, version = await admin.broker_config()
    assert after == before
    assert version["counter"] == 0
    saved = pathlib.Path(broker.config.store.store_path_root_dir) / "config" / "broker_runtime.json"
    assert not saved.exists()


def test_a_change_takes_effect_at_once_and_survives_a_restart(tmp_path: pathlib.Path) -> None:
    store_dir = tmp_path / "store"

    async def update(port: int) -> None:
        async with open_admin("127.0.0.1", port) as admin:
            await admin.create_topic("Ordered", 2, order=True)
            await admin.update_broker_config({"brokerPermission": "4", "region_id": "East"})
            await check_read_only(port, admin)

    async def check_read_only(port: int, admin: AdminClient) -> None:
        values, version = await admin.broker_config()
        assert (values["brokerPermission"], values["regionId"]) == ("4", "East")
        assert version["counter"] == 1
        route = await admin.connection.get_route("Ordered")
        assert route.queue_datas[0].perm == 4
        # without WRITE, 4.9.7 refuses sends to order topics (the routes steer the rest away)
        async with open_producer("127.0.0.1", port) as producer:
            with pytest.raises(SendError) as refused:
                await producer.send(Message("Ordered", b"x"))
            assert refused.value.code == ResponseCode.NO_PERMISSION
            sent = await producer.send(Message("Anything", b"x"))
            assert sent.region_id == "East"

    daemon = Daemon(store_dir)
    try:
        trio.run(update, daemon.port)
    finally:
        daemon.stop()
    daemon = Daemon(store_dir)
    try:
        overrides = {e.get("key"): e.get("value") for e in daemon.events}
        assert overrides.get("broker_permission") == "4"

        async def after_restart(port: int) -> None:
            async with open_admin("127.0.0.1", port) as admin:
                await check_read_only(port, admin)
                await admin.update_broker_config({"brokerPermission": "6"})
                async with open_producer("127.0.0.1", port) as producer:
                    await producer.send(Message("Ordered", b"x"))

        trio.run(after_restart, daemon.port)
    finally:
        daemon.stop()


async def test_acl_refuses_admin_requests_to_a_non_admin_account(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_acl_broker(nursery, tmp_path)
    port = broker.port
    async with open_admin("127.0.0.1", port, credentials=PLAIN) as plain:
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: plain.create_topic("Guarded", 2),
            lambda: plain.delete_topic("Guarded"),
            lambda: plain.update_broker_config({"traceOn": "false"}),
            lambda: plain.wipe_write_perm("broker-a"),
            lambda: plain.delete_topic_in_namesrv("Guarded"),
        ]
        for attempt in attempts:
            with pytest.raises(SendError) as refused:
                await attempt()
            assert refused.value.code == ResponseCode.NO_PERMISSION
            assert "Need admin permission" in (refused.value.remark or "")
        # read-only admin codes take any valid account, as 4.9's plain ACL does
        assert "Guarded" not in (await plain.topic_configs()).topic_config_table
        assert (await plain.runtime_info())["brokerVersion"] == "407"
    assert broker.config.trace_on
    async with open_admin("127.0.0.1", port) as unsigned:
        with pytest.raises(SendError) as anonymous:
            await unsigned.topic_configs()
        assert anonymous.value.code == ResponseCode.NO_PERMISSION
    async with open_admin("127.0.0.1", port, credentials=ADMIN) as admin:
        await admin.create_topic("Guarded", 2)
        await admin.update_broker_config({"traceOn": "false"})
        assert "Guarded" in (await admin.topic_configs()).topic_config_table
    assert not broker.config.trace_on
    await broker.stop()


async def test_cluster_list_finds_the_broker_and_its_figures(broker: RunningBroker) -> None:
    """mqadmin clusterList: cluster info from the name server, then each broker's figures."""
    await traffic(broker.port, 2, 1)
    async with open_admin("127.0.0.1", broker.port) as namesrv:
        cluster = await namesrv.connection.get_cluster_info()
    assert cluster.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    address = cluster.broker_addr_table["broker-a"].broker_addrs[0]
    assert address == f"127.0.0.1:{broker.port}"
    host, _, port = address.rpartition(":")
    async with open_admin(host, int(port)) as admin:
        info = await admin.runtime_info()
    assert info["msgPutTotalTodayNow"] == "2"
    assert info["msgGetTotalTodayNow"] == "1"


async def test_runtime_info_with_write_buffers(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(
        tmp_path / "store", transient_store_pool_enable=True, transient_store_pool_size=3
    )
    broker = await start_broker(nursery, config)
    await traffic(broker.port, 3, 3)
    async with open_admin("127.0.0.1", broker.port) as admin:
        info = await admin.runtime_info()
    # the segment being written and the one made ready after it hold a buffer each
    assert info["remainTransientStoreBufferNumbs"] == "1"
    assert info["remainHowManyDataToCommit"].endswith(" B")
    await broker.stop()


@pytest.mark.parametrize(
    ("saved", "problem"),
    [
        ("{not json", "cannot be read"),
        ('{"overrides": {"listen": "127.0.0.1:1"}}', "not run-time keys: listen"),
        ('{"overrides": {"max_connections": "0"}}', "max_connections: must be > 0"),
        ('{"overrides": {"trace_on": false}}', "overrides must map keys to text"),
    ],
)
def test_a_broker_with_an_unusable_saved_change_does_not_start(
    tmp_path: pathlib.Path, saved: str, problem: str
) -> None:
    config_dir = tmp_path / "store" / "config"
    config_dir.mkdir(parents=True)
    (config_dir / "broker_runtime.json").write_text(saved)
    refused = serve_refused(tmp_path / "store")
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if "configuration error" in line]
    assert len(lines) == 1
    assert "broker_runtime.json" in lines[0]
    assert problem in lines[0]
