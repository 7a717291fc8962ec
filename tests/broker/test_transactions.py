"""Transactions over loopback against a running broker: half messages ended by END_TRANSACTION,
and halves left open checked with the producers of their group (`broker.transaction`)."""

from __future__ import annotations

import pathlib

import trio

from broker.config import BrokerConfig
from broker.transaction import CHECK_MAX_TOPIC, OP_TOPIC
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.transaction_headers import EndTransactionRequestHeader
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from rmq_client.transaction import Checker, TransactionState, open_transaction_producer
from store.decode import CommitLogRecord
from store.message import TRANSACTION_COMMIT_TYPE, get_transaction_value
from tests.conftest import RunningBroker, make_config, start_broker
from tests.store.conftest import wait_until

TOPIC = "Orders"
GROUP = "orders_tx"


def fast_checks(tmp_path: pathlib.Path, **extra: object) -> BrokerConfig:
    return make_config(
        tmp_path / "store",
        transaction_time_out=200,
        transaction_check_interval=300,
        **extra,
    )


async def visible(broker: RunningBroker, topic: str = TOPIC) -> list[CommitLogRecord]:
    """Every record a consumer of `topic` can pull, all queues."""
    records: list[CommitLogRecord] = []
    async with open_pull_consumer("127.0.0.1", broker.port, "reader") as consumer:
        await consumer.subscribe(topic)
        route_queues = broker.server.broker.topics.find(topic)
        for queue in range(route_queues.read_queue_nums if route_queues else 0):
            result = await consumer.pull(topic, queue, 0, max_nums=32)
            records += result.records
    return records


def answering(state: TransactionState, calls: list[bytes]) -> Checker:
    async def checker(half: CommitLogRecord) -> TransactionState:
        calls.append(half.body or b"")
        return state

    return checker


async def test_commit_is_consumed_once_and_rollback_never(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    calls: list[bytes] = []

    async def commit(_m: Message, _s: object) -> TransactionState:
        return TransactionState.COMMIT

    async def rollback(_m: Message, _s: object) -> TransactionState:
        return TransactionState.ROLLBACK

    async with open_transaction_producer(
        "127.0.0.1", broker.port, GROUP, answering(TransactionState.UNKNOWN, calls)
    ) as tx:
        sent, state = await tx.send_in_transaction(Message(TOPIC, b"paid", queue_id=1), commit)
        assert state is TransactionState.COMMIT
        await tx.send_in_transaction(Message(TOPIC, b"cancelled", queue_id=1), rollback)
        # The same END_TRANSACTION again (a retry): answered, nothing stored twice.
        consume = broker.server.broker.consume
        assert consume is not None
        header = EndTransactionRequestHeader(
            GROUP,
            sent.queue_offset,
            int(sent.offset_msg_id[-16:], 16),
            TransactionState.COMMIT,
        )
        again = await tx.producer.request(
            RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
        )
        assert again.code == ResponseCode.SUCCESS
        await wait_until(lambda: consume.max_offset_in_queue(OP_TOPIC, 0) == 2)
    records = await visible(broker)
    assert [(r.body, r.queue_id) for r in records] == [(b"paid", 1)]
    [paid] = records
    assert get_transaction_value(paid.sys_flag) == TRANSACTION_COMMIT_TYPE
    assert paid.prepared_transaction_offset == int(sent.offset_msg_id[-16:], 16)
    assert "TRAN_MSG" not in paid.properties and "REAL_TOPIC" not in paid.properties
    assert calls == []  # ended in time: never checked
    await broker.stop()


async def test_an_unknown_half_is_checked_and_committed_through_another_producer(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, fast_checks(tmp_path))
    calls: list[bytes] = []

    async def unknown(_m: Message, _s: object) -> TransactionState:
        return TransactionState.UNKNOWN

    async with open_transaction_producer(
        "127.0.0.1", broker.port, GROUP, answering(TransactionState.UNKNOWN, [])
    ) as gone:
        await gone.send_in_transaction(Message(TOPIC, b"maybe", queue_id=0), unknown)
    # That producer has gone; another of the group answers the check.
    async with open_transaction_producer(
        "127.0.0.1", broker.port, GROUP, answering(TransactionState.COMMIT, calls)
    ) as other:
        consume = broker.server.broker.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue(TOPIC, 0) == 1, 30)
        assert other.checks >= 1
    assert calls[0] == b"maybe"
    await trio.sleep(1.0)  # further rounds: the committed half is never checked again
    records = [r for r in await visible(broker) if r.body == b"maybe"]
    assert len(records) == 1
    assert len(calls) == 1
    await broker.stop()


async def test_a_half_nobody_ends_is_given_up_after_its_checks(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, fast_checks(tmp_path, transaction_check_max=2))
    calls: list[bytes] = []

    async def unknown(_m: Message, _s: object) -> TransactionState:
        return TransactionState.UNKNOWN

    async with open_transaction_producer(
        "127.0.0.1", broker.port, GROUP, answering(TransactionState.UNKNOWN, calls)
    ) as tx:
        await tx.send_in_transaction(Message(TOPIC, b"never", queue_id=0), unknown)
        consume = broker.server.broker.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue(CHECK_MAX_TOPIC, 0) == 1, 30)
        await trio.sleep(1.0)
    assert calls == [b"never", b"never"]  # transaction_check_max checks, then no more
    assert [r.body for r in await visible(broker)] == []
    await broker.stop()


async def test_end_transaction_names_a_real_half_of_its_group(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    async with open_producer("127.0.0.1", broker.port, group=GROUP) as client:
        plain = await client.send(Message(TOPIC, b"plain", queue_id=0))
        plain_offset = int(plain.offset_msg_id[-16:], 16)
        cases = [
            (GROUP, 0, plain_offset, 8, "Find prepared transaction message failed"),
            (GROUP, 0, 123_456_789, 8, "Find prepared transaction message failed"),
            (GROUP, 0, plain_offset, 5, "commitOrRollback 5 is not 0, 8 or 12"),
        ]
        for group, queue_offset, offset, kind, remark in cases:
            header = EndTransactionRequestHeader(group, queue_offset, offset, kind)
            response = await client.request(
                RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
            )
            assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    records = await visible(broker)
    assert [r.body for r in records] == [b"plain"]
    await broker.stop()
