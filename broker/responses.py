"""From a store outcome to a response: every store-status table of the broker, in one place.

- A send: `PUT_RESULT_TO_RESPONSE`, `PutMessageStatus` -> (code, remark), mirroring the single
  switch of RocketMQ's `SendMessageProcessor.handlePutMessageResult` (4.9.7). Remarks that need
  a value carry a `{placeholder}`: `{max_message_size}` and `{disk}` (the disk usage ratios of
  the store). Every member of `PutMessageStatus` has an entry; a test checks it.
- A message stored again (a delayed delivery, a send-back, a transaction's commit or op):
  `STORED` and `NEVER_STORED`, and the send-back's answer, `send_back_response`.
- A pull: `GET_RESULT_TO_RESPONSE` and `EMPTY_QUEUE_STATUSES`, `GetMessageStatus` -> code.
- The metrics of a put: `STATUS_NAMES` and `BUSY_REASONS`.
"""

from __future__ import annotations

import shutil
from typing import Final

from protocol.codes import ResponseCode
from store.get_message import GetMessageStatus
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

#: the response code of each send-OK status, as plain ints (the burst path's table)
SEND_OK_CODES: Final = {
    status: int(PUT_RESULT_TO_RESPONSE[status][0]) for status in SEND_OK_STATUSES
}

#: a message stored again (a delayed delivery, a retry, a transaction's) is in the commit log
#: with these (it is acknowledged without waiting for the flush)
STORED: Final = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT})
#: refusals of the message itself: putting it again the same way can never succeed
NEVER_STORED: Final = frozenset(
    {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}
)

#: Enum's `name` is a Python-level property; the send path reads it for every put
STATUS_NAMES: Final = {member: member.name for member in PutMessageStatus}
#: statuses that mean flow control (the writer is full or stuck), by busy-counter reason
BUSY_REASONS: Final = {
    PutMessageStatus.WRITER_QUEUE_FULL: "writer_queue_full",
    PutMessageStatus.OS_PAGE_CACHE_BUSY: "os_page_cache_busy",
}

#: a pull's answer by the store's read outcome (RocketMQ's `PullMessageProcessor`); the
#: statuses of `EMPTY_QUEUE_STATUSES` depend on the requested offset (`pull_response_code`)
GET_RESULT_TO_RESPONSE: Final = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}
#: a queue that is empty or does not exist yet: nothing to read at 0, an offset moved elsewhere
EMPTY_QUEUE_STATUSES: Final = frozenset(
    {GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE}
)


def pull_response_code(status: GetMessageStatus, queue_offset: int) -> ResponseCode:
    """The code of a pull from `queue_offset` that the store answered with `status`."""
    if status in EMPTY_QUEUE_STATUSES:
        return ResponseCode.PULL_NOT_FOUND if queue_offset == 0 else ResponseCode.PULL_OFFSET_MOVED
    return GET_RESULT_TO_RESPONSE[status]


def send_back_response(status: PutMessageStatus) -> tuple[int, str | None]:
    """CONSUMER_SEND_MSG_BACK's code and remark: SUCCESS once the retry is stored, else
    SYSTEM_ERROR naming the store's status."""
    if status in STORED:
        return int(ResponseCode.SUCCESS), None
    return int(ResponseCode.SYSTEM_ERROR), status.name


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
