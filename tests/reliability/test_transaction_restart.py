"""Transactions across broker restarts, on a real `rmq-broker serve` process: a half message
survives a kill -9 and is committed afterwards, the check resumes after a restart, and no
transaction is ended twice however often the broker restarts."""

from __future__ import annotations

import pathlib

import trio

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.msgid import decode_offset_msg_id
from protocol.transaction_headers import EndTransactionRequestHeader
from rmq_client.producer import Message, SendResult
from rmq_client.pull_consumer import open_pull_consumer
from rmq_client.transaction import TransactionState, open_transaction_producer
from store.decode import CommitLogRecord
from tests.reliability.conftest import Daemon

TOPIC = "TxRestart"
GROUP = "tx_restart"
FAST = {"RMQ_TRANSACTION_TIME_OUT": "300", "RMQ_TRANSACTION_CHECK_INTERVAL": "500"}


async def unknown(_message: Message, _sent: SendResult) -> TransactionState:
    return TransactionState.UNKNOWN


async def bodies(port: int) -> list[bytes]:
    async with open_pull_consumer("127.0.0.1", port, "tx_reader") as consumer:
        await consumer.subscribe(TOPIC)
        result = await consumer.pull(TOPIC, 0, 0, max_nums=32)
        return sorted(r.body or b"" for r in result.records)


def test_halves_survive_kills_and_are_ended_once(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "store"
    checked: list[bytes] = []
    answer = {"state": TransactionState.UNKNOWN}

    async def checker(half: CommitLogRecord) -> TransactionState:
        checked.append(half.body or b"")
        return answer["state"]

    daemon = Daemon(store, "--flush-disk-type", "SYNC_FLUSH", env=FAST)
    first: list[SendResult] = []

    async def send_half() -> None:
        async with open_transaction_producer("127.0.0.1", daemon.port, GROUP, checker) as tx:
            sent, _ = await tx.send_in_transaction(Message(TOPIC, b"h1", queue_id=0), unknown)
            first.append(sent)

    trio.run(send_half)
    daemon.kill()  # between the half and its commit

    daemon = Daemon(store, "--flush-disk-type", "SYNC_FLUSH", env=FAST)

    async def after_kill() -> list[bytes]:
        async with open_transaction_producer("127.0.0.1", daemon.port, GROUP, checker) as tx:
            [sent] = first
            header = EndTransactionRequestHeader(
                GROUP, sent.queue_offset, decode_offset_msg_id(sent.offset_msg_id)[2], 8
            )
            await tx.producer.request(
                RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
            )
            answer["state"] = TransactionState.COMMIT  # the check commits what is left open
            await tx.send_in_transaction(Message(TOPIC, b"h2", queue_id=0), unknown)
            for _ in range(300):  # the check rounds come every 0.5 s: 60 s at most
                if await bodies(daemon.port) == [b"h1", b"h2"]:
                    break
                await trio.sleep(0.2)
        return await bodies(daemon.port)

    assert trio.run(after_kill) == [b"h1", b"h2"]
    # h1 may have been checked before its END_TRANSACTION came (answered UNKNOWN then); h2 was.
    assert b"h2" in checked
    assert daemon.stop() == 0
    calls = len(checked)

    daemon = Daemon(store, "--flush-disk-type", "SYNC_FLUSH", env=FAST)

    async def after_restart() -> list[bytes]:
        async with open_transaction_producer("127.0.0.1", daemon.port, GROUP, checker):
            await trio.sleep(2.0)  # four check rounds: nothing is open any more
            return await bodies(daemon.port)

    assert trio.run(after_restart) == [b"h1", b"h2"]
    assert len(checked) == calls, "an ended transaction was checked again after the restart"
    assert daemon.stop() == 0
