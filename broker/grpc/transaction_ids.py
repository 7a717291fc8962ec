"""Transactions of RocketMQ 5 producers: the transaction id, EndTransaction, and the check sent
down the producer's Telemetry stream.

A 5.x producer ends its transaction with the `transaction_id` the send answered and the
message id, no producer group and no offsets. The id therefore carries what 4.9's
END_TRANSACTION header names: the half's commit-log offset and its queue offset in the half
topic, as 32 hex digits. The producer group of a 5.x half is its topic (what 5.x's proxy
stores in PGROUP), so the half is found and checked as a 4.x producer's would be.

The broker's transaction check (`broker.transaction`) hands a CHECK_TRANSACTION_STATE command
to a channel of the group; a 5.x session's channel turns it into a
`RecoverOrphanedTransactionCommand` carrying the half as a 5.x message and the id of the new
half the check stored, which the producer's answer then ends (source SOURCE_SERVER_CHECK).
"""

from __future__ import annotations

import re
from typing import Final

import structlog

from broker.context import BrokerContext
from broker.grpc.methods import CallContext, Message
from broker.grpc.outbound import to_v5
from broker.grpc.status import from_remoting, status
from broker.processors import RequestContext
from broker.processors.end_transaction import EndTransactionProcessor
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.properties import MessageConst, decode_properties
from protocol.transaction_headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from protocol.v2 import load
from store.decode import decode_copied_records
from store.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE

log = structlog.get_logger()
_MC = MessageConst
_ID: Final = re.compile(r"[0-9A-F]{32}")


def transaction_id(commit_log_offset: int, queue_offset: int) -> str:
    return f"{commit_log_offset:016X}{queue_offset:016X}"


def parse_transaction_id(text: str) -> tuple[int, int] | None:
    """(commit-log offset, queue offset) of an id `transaction_id` made, else None."""
    if not _ID.fullmatch(text):
        return None
    return int(text[:16], 16), int(text[16:], 16)


def half_to_message(body: bytes) -> Message | None:
    """The 5.x message of the half record `body` holds (as the check command carries it)."""
    try:
        records = decode_copied_records(body)
    except Exception:
        log.warning("grpc_check_body_unreadable", size=len(body))
        return None
    if not records:
        return None
    record = records[0]
    props = decode_properties(record.properties)
    message = to_v5(record, topic=props.get(_MC.REAL_TOPIC, record.topic), invisible_ms=None)
    # the half record sits in the half topic's queue 0: the client knows its real queue
    message.system_properties.queue_id = int(props.get(_MC.REAL_QUEUE_ID, "0") or 0)
    return message


def check_command_to_telemetry(command: RemotingCommand) -> Message | None:
    """The Telemetry command for a CHECK_TRANSACTION_STATE request, None if not one."""
    if command.code != RequestCode.CHECK_TRANSACTION_STATE:
        return None
    _, service = load()
    header = CheckTransactionStateRequestHeader.from_ext_fields(command.ext_fields)
    message = half_to_message(command.body or b"")
    if message is None:
        return None
    recover = service.RecoverOrphanedTransactionCommand(
        message=message,
        transaction_id=transaction_id(header.commit_log_offset, header.tran_state_table_offset),
    )
    return service.TelemetryCommand(recover_orphaned_transaction_command=recover)


class EndTransactionService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self._processor = EndTransactionProcessor()

    async def end_transaction(self, request: Message, context: CallContext) -> Message:
        definition, service = load()
        offsets = parse_transaction_id(request.transaction_id)
        if offsets is None:
            return service.EndTransactionResponse(
                status=status(
                    "INVALID_TRANSACTION_ID", f"transaction id {request.transaction_id!r} unknown"
                )
            )
        resolution = definition.TransactionResolution.Name(request.resolution)
        if resolution not in ("COMMIT", "ROLLBACK"):
            return service.EndTransactionResponse(
                status=status("BAD_REQUEST", f"resolution {resolution} is not COMMIT or ROLLBACK")
            )
        commit_log_offset, queue_offset = offsets
        header = EndTransactionRequestHeader(
            producer_group=request.topic.name,
            tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=(
                TRANSACTION_COMMIT_TYPE if resolution == "COMMIT" else TRANSACTION_ROLLBACK_TYPE
            ),
            from_transaction_check=request.source
            == definition.TransactionSource.Value("SOURCE_SERVER_CHECK"),
            msg_id=request.message_id or None,
            transaction_id=request.transaction_id,
        )
        command = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
        host, _, port = context.peer.rpartition(":")
        ctx = RequestContext(
            self.broker, -context.conn_id, (host.strip("[]"), int(port) if port.isdigit() else 0)
        )
        response = await self._processor.process(command, ctx)
        return service.EndTransactionResponse(status=from_remoting(response.code, response.remark))
