"""Messages the broker stores again itself (a send-back, a due delayed message) do not wait for
a slave, so on a SYNC_MASTER without one they are stored once and answered as stored: a
send-back is answered SUCCESS (not SYSTEM_ERROR, which makes the client send it again) and a
delayed message is delivered once, not again on every tick of the schedule."""

from __future__ import annotations

import pathlib

import trio

from protocol.codes import ResponseCode
from rmq_client.producer import Message, SendStatus, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.broker.test_send_back import GROUP, send_back
from tests.conftest import make_config, start_broker


async def test_re_stored_messages_on_a_sync_master_without_a_slave(
    tmp_path: pathlib.Path,
) -> None:
    config = make_config(tmp_path / "store", broker_role="SYNC_MASTER")
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        try:
            async with open_producer("127.0.0.1", broker.port) as producer:
                sent = await producer.send(Message("Work", b"back", queue_id=0))
                delayed = await producer.send(
                    Message("Later", b"due", queue_id=0, delay_level=1)  # 1 s
                )
            assert sent.status is delayed.status is SendStatus.SLAVE_NOT_AVAILABLE
            offset = int(sent.offset_msg_id[-16:], 16)
            async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
                await consumer.subscribe("Work")
                answer = await send_back(consumer, offset, delay_level=0)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                await trio.sleep(3.5)  # three ticks of the 1 s level past its due time
                found = await consumer.pull("Later", 0, 0, expression="*")
            assert [r.body for r in found.records] == [b"due"]
        finally:
            await broker.stop()
