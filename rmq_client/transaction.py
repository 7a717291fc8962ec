"""A transactional producer over `rmq_client.producer`: half, local transaction, end, checks.

    async def local(message: Message, sent: SendResult) -> TransactionState: ...
    async def checker(half: CommitLogRecord) -> TransactionState: ...

    async with open_transaction_producer(host, port, "orders_tx", checker) as producer:
        sent, state = await producer.send_in_transaction(Message("Orders", b"..."), local)

As the Java `TransactionMQProducer`: the message goes out as a half (TRAN_MSG, PGROUP, the
PREPARED sys flag), the caller's local transaction runs, and END_TRANSACTION (oneway) commits,
rolls back or leaves it unknown (an exception in the local transaction is UNKNOWN). The
connection announces its producer group by heartbeat, so the broker may ask it about any half
of the group it has not heard the end of (CHECK_TRANSACTION_STATE): `checker` answers with the
half message as stored, and its answer is sent as END_TRANSACTION marked as from a check.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Final

import structlog
import trio

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from protocol.msgid import decode_offset_msg_id
from protocol.properties import MessageConst, decode_properties
from protocol.route import HeartbeatData, ProducerData
from protocol.transaction_headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from rmq_client.producer import Message, Producer, SendResult, open_producer
from store.decode import CommitLogRecord, RecordFormatError, decode_copied_records
from store.message import TRANSACTION_PREPARED_TYPE

HEARTBEAT_S: Final = 30.0
log = structlog.get_logger()


class TransactionState(enum.IntEnum):
    """What END_TRANSACTION says (its commitOrRollback values)."""

    UNKNOWN = 0
    COMMIT = 8
    ROLLBACK = 12


LocalTransaction = Callable[[Message, SendResult], Awaitable[TransactionState]]
Checker = Callable[[CommitLogRecord], Awaitable[TransactionState]]


class TransactionProducer:
    def __init__(self, producer: Producer, checker: Checker, client_id: str) -> None:
        self.producer = producer
        self.checker = checker
        self.client_id = client_id
        self.checks = 0  # CHECK_TRANSACTION_STATE requests answered

    async def send_in_transaction(
        self, message: Message, local: LocalTransaction
    ) -> tuple[SendResult, TransactionState]:
        props = {
            **message.properties,
            MessageConst.TRANSACTION_PREPARED: "true",
            MessageConst.PRODUCER_GROUP: self.producer.group,
        }
        half = replace(message, properties=props, delay_level=0)
        sent = await self.producer.send(half, sys_flag=TRANSACTION_PREPARED_TYPE)
        try:
            state = await local(message, sent)
        except Exception:
            log.exception("local_transaction_failed", msg_id=sent.msg_id)
            state = TransactionState.UNKNOWN
        commit_log_offset = decode_offset_msg_id(sent.offset_msg_id)[2]
        await self._end(sent.queue_offset, commit_log_offset, sent.msg_id, state, from_check=False)
        return sent, state

    async def _end(
        self,
        queue_offset: int,
        commit_log_offset: int,
        msg_id: str | None,
        state: TransactionState,
        *,
        from_check: bool,
    ) -> None:
        header = EndTransactionRequestHeader(
            self.producer.group,
            queue_offset,
            commit_log_offset,
            int(state),
            from_check,
            msg_id,
            msg_id,
        )
        command = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
        await self.producer.oneway(command)

    async def heartbeat(self) -> None:
        body = HeartbeatData(self.client_id, (ProducerData(self.producer.group),)).to_json()
        await self.producer.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=body))

    async def serve_checks(self, requests: trio.MemoryReceiveChannel[RemotingCommand]) -> None:
        async for request in requests:
            if request.code != RequestCode.CHECK_TRANSACTION_STATE:
                continue
            try:
                header = CheckTransactionStateRequestHeader.from_ext_fields(request.ext_fields)
                [half] = decode_copied_records(request.body or b"")
            except (HeaderFieldError, RecordFormatError, ValueError):
                log.warning("bad_transaction_check", fields=request.ext_fields)
                continue
            try:
                state = await self.checker(half)
            except Exception:
                log.exception("transaction_checker_failed", offset=header.commit_log_offset)
                state = TransactionState.UNKNOWN
            uniq = decode_properties(half.properties).get(
                MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
            )
            self.checks += 1
            await self._end(
                header.tran_state_table_offset,
                header.commit_log_offset,
                uniq,
                state,
                from_check=True,
            )


@asynccontextmanager
async def open_transaction_producer(
    host: str, port: int, group: str, checker: Checker, *, client_id: str | None = None
) -> AsyncIterator[TransactionProducer]:
    """A transactional producer of `group` that answers the broker's checks with `checker`."""
    async with open_producer(host, port, group=group) as producer:
        send, receive = trio.open_memory_channel[RemotingCommand](64)
        producer.broker_requests = send
        tx = TransactionProducer(producer, checker, client_id or f"tx-{group}@{id(producer)}")
        await tx.heartbeat()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tx.serve_checks, receive)
            nursery.start_soon(_heartbeats, tx)
            try:
                yield tx
            finally:
                nursery.cancel_scope.cancel()


async def _heartbeats(tx: TransactionProducer) -> None:
    while True:
        await trio.sleep(HEARTBEAT_S)
        await tx.heartbeat()
