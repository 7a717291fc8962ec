"""Queue locks of orderly consumers: the table (with a clock of our own) and LOCK_BATCH_MQ /
UNLOCK_BATCH_MQ over loopback against a running broker."""

from __future__ import annotations

import pathlib

import pytest
import trio

from broker.rebalance_lock import RebalanceLockManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from protocol.lock_body import MAX_MQ_SET, LockBatchBody, MessageQueue, decode_locked
from rmq_client.producer import Message, Producer, SendError, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.conftest import make_config, start_broker

Q0, Q1, Q2 = (MessageQueue("T", "broker-a", i) for i in range(3))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_holder_per_queue_until_its_lock_expires() -> None:
    clock = Clock()
    locks = RebalanceLockManager(60.0, clock)
    assert locks.try_lock_batch("g", [Q0, Q1], "a") == [Q0, Q1]
    assert locks.try_lock_batch("g", [Q0, Q1, Q2], "b") == [Q2]  # a holds 0 and 1
    assert locks.try_lock_batch("other", [Q0], "b") == [Q0]  # locks are per group
    clock.now += 59
    assert locks.try_lock_batch("g", [Q0], "a") == [Q0]  # renewed
    clock.now += 30
    # Q1 was last renewed 89 s ago: expired, b takes it; Q0 only 30 s ago: still a's.
    assert locks.try_lock_batch("g", [Q0, Q1], "b") == [Q1]
    assert locks.holder("g", Q0) == "a"
    assert locks.holder("g", Q1) == "b"


def test_unlock_releases_only_the_callers_own_locks_and_expire_empties_the_table() -> None:
    clock = Clock()
    locks = RebalanceLockManager(60.0, clock)
    locks.try_lock_batch("g", [Q0, Q1], "a")
    assert locks.unlock_batch("g", [Q0, Q1], "b") == 0
    assert locks.holder("g", Q0) == "a"
    assert locks.unlock_batch("g", [Q0], "a") == 1
    assert locks.try_lock_batch("g", [Q0], "b") == [Q0]
    assert locks.lock_count == 2
    clock.now += 61
    assert locks.holder("g", Q1) is None
    assert locks.expire() == 2
    assert locks.lock_count == 0


async def lock(client: Producer, group: str, client_id: str, *queues: MessageQueue) -> list[int]:
    body = LockBatchBody(group, client_id, queues).to_json()
    command = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body)
    response = await client.request(command)
    if response.code != ResponseCode.SUCCESS:
        raise SendError(response.code, response.remark)
    return sorted(mq.queue_id for mq in decode_locked(response.body or b""))


async def unlock(client: Producer, group: str, client_id: str, *queues: MessageQueue) -> None:
    body = LockBatchBody(group, client_id, queues).to_json()
    command = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body)
    assert (await client.request(command)).code == ResponseCode.SUCCESS


async def test_lock_batch_over_the_wire(nursery: trio.Nursery, tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path / "store", rebalance_lock_max_live_time=300)
    broker = await start_broker(nursery, config)
    queues = [MessageQueue("Ordered", "broker-a", i) for i in range(4)]
    async with open_producer("127.0.0.1", broker.port) as client:
        await client.send(Message("Ordered", b"x"))  # the topic, with 4 queues
        async with open_pull_consumer("127.0.0.1", broker.port, "orderly") as consumer:
            await consumer.subscribe("Ordered")  # the group
        assert await lock(client, "orderly", "a@1", *queues[:2]) == [0, 1]
        assert await lock(client, "orderly", "b@2", *queues) == [2, 3]
        # Queues this broker does not have are never locked: another broker's, a queue id past
        # the topic's, an unknown topic; nor are the queues of an unknown group.
        strangers = (
            MessageQueue("Ordered", "broker-b", 0),
            MessageQueue("Ordered", "broker-a", 4),
            MessageQueue("Unknown", "broker-a", 0),
        )
        assert await lock(client, "orderly", "c@3", *strangers) == []
        assert await lock(client, "nobody", "c@3", *queues) == []
        await unlock(client, "orderly", "b@2", *queues)  # b's own: 2 and 3
        assert await lock(client, "orderly", "c@3", *queues) == [2, 3]
        await trio.sleep(0.5)  # past the 300 ms live time: a's locks have expired
        assert await lock(client, "orderly", "c@3", *queues) == [0, 1, 2, 3]
        assert broker.server.broker.locks.lock_count == 4
    await broker.stop()


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b'{"consumerGroup": 1, "clientId": "a", "mqSet": []}', "consumerGroup"),
        (b'{"consumerGroup": "g", "clientId": "", "mqSet": []}', "clientId"),
        (b'{"consumerGroup": "g", "clientId": "a", "mqSet": [{"topic": "T"}]}', "brokerName"),
        (b'{"consumerGroup": "g", "clientId": "a", "mqSet": {}}', "mqSet"),
        (b"[]", "object"),
    ],
)
async def test_a_malformed_lock_body_is_refused_and_locks_nothing(
    nursery: trio.Nursery, tmp_path: pathlib.Path, body: bytes, names: str
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    async with open_producer("127.0.0.1", broker.port) as client:
        for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
            response = await client.request(RemotingCommand.request(code, body=body))
            assert response.code == ResponseCode.SYSTEM_ERROR
            assert names in (response.remark or "")
    assert broker.server.broker.locks.lock_count == 0
    await broker.stop()


def test_a_lock_body_naming_too_many_queues_is_refused() -> None:
    mqs = ",".join('{"topic":"T","brokerName":"b","queueId":0}' for _ in range(MAX_MQ_SET + 1))
    body = f'{{"consumerGroup":"g","clientId":"a","mqSet":[{mqs}]}}'.encode()
    with pytest.raises(HeaderFieldError, match="more than"):
        LockBatchBody.from_json(body)
