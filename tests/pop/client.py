"""A small remoting client of pop consumption for the tests: POP_MESSAGE, ACK_MESSAGE and
CHANGE_MESSAGE_INVISIBLETIME with RocketMQ 5's headers, over a connection of `rmq_client`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from protocol.properties import decode_properties
from rmq_client.producer import Producer
from store.decode import CommitLogRecord, decode_copied_records


@dataclass(frozen=True, slots=True)
class Popped:
    record: CommitLogRecord
    receipt: str

    @property
    def body(self) -> bytes:
        return self.record.body or b""

    @property
    def queue_id(self) -> int:
        return self.record.queue_id

    @property
    def offset(self) -> int:
        return self.record.queue_offset


class PopError(Exception):
    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"{ResponseCode.name_of(code)}: {remark}")
        self.code = code
        self.remark = remark or ""


async def pop_raw(
    conn: Producer,
    group: str,
    topic: str,
    *,
    queue_id: int = -1,
    max_nums: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
    exp: str | None = None,
    exp_type: str = "TAG",
    order: bool = False,
) -> RemotingCommand:
    header = PopMessageRequestHeader(
        group, topic, queue_id, max_nums, invisible_ms, poll_ms, 0, 0, exp_type, exp or "*", order
    )
    command = RemotingCommand.request(RequestCode.POP_MESSAGE, header.to_ext_fields())
    return await conn.request(command)


async def order_pop_until(
    conn: Producer, group: str, topic: str, timeout_s: float
) -> tuple[bytes, str]:
    """The body and orderCountInfo of the next FIFO pop (1 s invisible) that hands out a
    message."""
    with trio.fail_after(timeout_s):
        while True:
            response = await pop_raw(conn, group, topic, max_nums=1, invisible_ms=1_000, order=True)
            if response.code == ResponseCode.SUCCESS:
                header = PopMessageResponseHeader.from_ext_fields(response.ext_fields)
                [record] = decode_copied_records(response.body or b"")
                return record.body or b"", header.order_count_info or ""
            await trio.sleep(0.1)


async def pop(conn: Producer, group: str, topic: str, **options: Any) -> list[Popped]:
    """The messages one pop hands out ([] when none is there); `PopError` for a refusal."""
    response = await pop_raw(conn, group, topic, **options)
    if response.code == ResponseCode.PULL_NOT_FOUND:
        return []
    if response.code != ResponseCode.SUCCESS:
        raise PopError(response.code, response.remark)
    PopMessageResponseHeader.from_ext_fields(response.ext_fields)  # well-formed
    out = []
    for record in decode_copied_records(response.body or b""):
        receipt = decode_properties(record.properties)["POP_CK"]
        out.append(Popped(record, receipt))
    return out


async def ack(conn: Producer, group: str, topic: str, message: Popped) -> None:
    await ack_receipt(
        conn,
        group,
        topic,
        queue_id=message.queue_id,
        offset=message.offset,
        receipt=message.receipt,
    )


async def ack_receipt(
    conn: Producer, group: str, topic: str, *, queue_id: int, offset: int, receipt: str
) -> None:
    header = AckMessageRequestHeader(group, topic, queue_id, receipt, offset)
    response = await conn.request(
        RemotingCommand.request(RequestCode.ACK_MESSAGE, header.to_ext_fields())
    )
    if response.code != ResponseCode.SUCCESS:
        raise PopError(response.code, response.remark)


async def change_invisible(
    conn: Producer, group: str, topic: str, message: Popped, invisible_ms: int
) -> str:
    """The new receipt handle, built as 5.x clients build it from the answer."""
    header = ChangeInvisibleTimeRequestHeader(
        group, topic, message.queue_id, message.receipt, message.offset, invisible_ms
    )
    response = await conn.request(
        RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext_fields())
    )
    if response.code != ResponseCode.SUCCESS:
        raise PopError(response.code, response.remark)
    answer = ChangeInvisibleTimeResponseHeader.from_ext_fields(response.ext_fields)
    old = message.receipt.split(" ")
    return " ".join(
        [
            str(message.offset),
            str(answer.pop_time),
            str(answer.invisible_time),
            str(answer.revive_qid),
            old[4],
            old[5],
            str(message.queue_id),
            str(message.offset),
        ]
    )
