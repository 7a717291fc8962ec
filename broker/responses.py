"""From a store outcome to a send response: one table, `PutMessageStatus` -> (code, remark).

Mirrors the single switch of RocketMQ's `SendMessageProcessor.handlePutMessageResult` (4.9.7).
Remarks that need a value carry a `{placeholder}`: `{max_message_size}` and `{disk}` (the disk
usage ratios of the store). Every member of `PutMessageStatus` has an entry; a test checks it.
"""

from __future__ import annotations

import shutil
from typing import Final

from protocol.codes import ResponseCode
from store.status import PutMessageStatus

ILLEGAL_REMARK: Final = (
    "the message is illegal, maybe msg body or properties length not matched. "
    "msg body length limit {max_message_size}B, msg properties length limit 32KB."
)
SERVICE_NOT_AVAILABLE_REMARK: Final = (
    "service not available now. It may be caused by one of the following reasons: "
    "the broker's disk is full [{disk}], messages are put to the slave, "
    "message store has been shut down, etc."
)
WRITER_QUEUE_FULL_REMARK: Final = (
    "[OVERLOAD]system busy, start flow control for a while: the store's writer queue is full "
    "({put_queue_capacity} puts waiting, put_queue_capacity)"
)

PUT_RESULT_TO_RESPONSE: Final[dict[PutMessageStatus, tuple[ResponseCode, str | None]]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, ILLEGAL_REMARK),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL, ILLEGAL_REMARK),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        SERVICE_NOT_AVAILABLE_REMARK,
    ),
    PutMessageStatus.OS_PAGE_CACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
    PutMessageStatus.LMQ_CONSUME_QUEUE_NUM_EXCEEDED: (
        ResponseCode.SYSTEM_ERROR,
        "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]broker config enableLmq and enableMultiDispatch, "
        "lmq consumeQueue num exceed maxLmqConsumeQueueNum config num",
    ),
    PutMessageStatus.WRITER_QUEUE_FULL: (ResponseCode.SYSTEM_BUSY, WRITER_QUEUE_FULL_REMARK),
}

#: the statuses after which the message is in the commit log ("send OK" codes)
SEND_OK_STATUSES: Final = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


def disk_ratio_text(store_dir: str) -> str:
    """`CL: %5.2f CQ: %5.2f INDEX: %5.2f` of the partition holding `store_dir` (-1 if unknown).

    One partition holds the commit log, consume queues and index here, so the three agree.
    """
    try:
        usage = shutil.disk_usage(store_dir)
        ratio = usage.used / usage.total if usage.total else -1.0
    except OSError:
        ratio = -1.0
    return f"CL: {ratio:5.2f} CQ: {ratio:5.2f} INDEX: {ratio:5.2f}"


def put_result_response(
    status: PutMessageStatus,
    *,
    max_message_size: int,
    store_dir: str,
    put_queue_capacity: int = 0,
) -> tuple[int, str | None]:
    """The response code and remark for `status`, placeholders filled in."""
    code, remark = PUT_RESULT_TO_RESPONSE[status]
    if remark is None or "{" not in remark:
        return int(code), remark
    disk = disk_ratio_text(store_dir) if "{disk}" in remark else ""
    return int(code), remark.format(
        max_message_size=max_message_size, disk=disk, put_queue_capacity=put_queue_capacity
    )
