"""The hook the name-server registration calls: a slave started without `ha_master_address`
waits, then replicates once `update_master_addresses` names its master; a bad address changes
nothing; an explicit `ha_master_address` is never overridden."""

from __future__ import annotations

import itertools
import pathlib

import trio
from structlog.testing import capture_logs

from broker.ha.service import HAService
from rmq_client.producer import Message, SendStatus, open_producer
from tests.conftest import RunningBroker, make_config, start_broker
from tests.store.conftest import wait_until


def ha_of(broker: RunningBroker) -> HAService:
    ha = broker.server.broker.ha
    assert ha is not None
    return ha


async def send_status(port: int) -> SendStatus:
    async with open_producer("127.0.0.1", port) as client:
        return (await client.send(Message("HookTopic", b"x"))).status


async def test_a_slave_follows_the_address_registration_hands_it(tmp_path: pathlib.Path) -> None:
    async with trio.open_nursery() as nursery:
        master = await start_broker(nursery, make_config(tmp_path / "m", broker_role="SYNC_MASTER"))
        slave = await start_broker(nursery, make_config(tmp_path / "s", broker_role="SLAVE"))
        try:
            ha_port = ha_of(master).ha_port
            client = ha_of(slave).client
            assert ha_port and client is not None and client.master is None
            assert await send_status(master.port) is SendStatus.SLAVE_NOT_AVAILABLE
            with capture_logs() as logs:
                ha_of(slave).update_master_addresses("no port here", "")
            assert [e["event"] for e in logs] == ["ha_master_address_refused"]
            assert client.master is None
            ha_of(slave).update_master_addresses(f"127.0.0.1:{ha_port}", f"127.0.0.1:{master.port}")
            await wait_until(lambda: client.connected, 20)
            with trio.fail_after(20):
                for _ in itertools.count():  # until the master counts the slave
                    if await send_status(master.port) is SendStatus.SEND_OK:
                        break
                    await trio.sleep(0.05)
            sync = ha_of(slave).sync
            assert sync is not None and sync.master is not None
            assert sync.master.port == master.port
        finally:
            await slave.stop()
            await master.stop()


async def test_a_configured_master_address_wins(tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path / "s", broker_role="SLAVE", ha_master_address="127.0.0.1:1")
    async with trio.open_nursery() as nursery:
        slave = await start_broker(nursery, config)
        try:
            ha_of(slave).update_master_addresses("127.0.0.1:2", "")
            client = ha_of(slave).client
            assert client is not None and client.master is not None
            assert client.master.port == 1
        finally:
            await slave.stop()
