"""The store-status tables: PutMessageStatus -> (ResponseCode, remark) covers every status and
its remark; every GetMessageStatus has a pull answer; a send-back is answered by its store
status."""

from __future__ import annotations

import re

import pytest

from broker.responses import (
    PUT_RESULT_TO_RESPONSE,
    SEND_OK_STATUSES,
    STORED,
    disk_ratio_text,
    pull_response_code,
    put_result_response,
    send_back_response,
)
from protocol.codes import ResponseCode
from store.get_message import GetMessageStatus
from store.status import PutMessageStatus


def test_every_status_has_an_entry() -> None:
    assert set(PUT_RESULT_TO_RESPONSE) == set(PutMessageStatus)


@pytest.mark.parametrize("status", list(PutMessageStatus))
def test_send_ok_statuses_have_no_remark_and_the_others_have_one(
    status: PutMessageStatus, tmp_path: object
) -> None:
    code, remark = put_result_response(
        status, max_message_size=4194304, store_dir=str(tmp_path), put_queue_capacity=10000
    )
    if status in SEND_OK_STATUSES:
        assert remark is None
        assert code in {0, 10, 11, 12}
    else:
        assert remark
        assert "{" not in remark
        assert code not in {0, 10, 11, 12}


def test_upstream_codes_and_remarks(tmp_path: object) -> None:
    def answer(status: PutMessageStatus) -> tuple[int, str | None]:
        return put_result_response(status, max_message_size=1024, store_dir=str(tmp_path))

    assert answer(PutMessageStatus.FLUSH_DISK_TIMEOUT) == (ResponseCode.FLUSH_DISK_TIMEOUT, None)
    assert answer(PutMessageStatus.MESSAGE_ILLEGAL) == (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 1024B, msg properties length limit 32KB.",
    )
    assert answer(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)[0] == ResponseCode.MESSAGE_ILLEGAL
    assert answer(PutMessageStatus.CREATE_MAPPED_FILE_FAILED) == (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    )
    code, remark = answer(PutMessageStatus.SERVICE_NOT_AVAILABLE)
    assert code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert remark is not None
    assert re.fullmatch(
        r"service not available now\. It may be caused by one of the following reasons: "
        r"the broker's disk is full \[CL: [ \d.]{5} CQ: [ \d.]{5} INDEX: [ \d.]{5}\], "
        r"messages are put to the slave, message store has been shut down, etc\.",
        remark,
    ), remark
    code, remark = answer(PutMessageStatus.WRITER_QUEUE_FULL)
    assert code == ResponseCode.SYSTEM_BUSY
    assert remark is not None and "writer queue is full" in remark


def test_disk_ratio_is_formatted_like_java(tmp_path: object) -> None:
    text = disk_ratio_text(str(tmp_path))
    ratio = float(text.split()[1])
    assert 0.0 <= ratio <= 1.0
    assert disk_ratio_text("/no/such/dir/at/all") == "CL: -1.00 CQ: -1.00 INDEX: -1.00"


@pytest.mark.parametrize("status", list(GetMessageStatus))
def test_every_read_outcome_has_a_pull_answer(status: GetMessageStatus) -> None:
    at_zero, further = pull_response_code(status, 0), pull_response_code(status, 7)
    if status in {GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE}:
        # an empty queue: nothing yet at 0 (the pull is held), an offset moved elsewhere
        assert (at_zero, further) == (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED)
    else:
        assert at_zero == further
    assert (at_zero == ResponseCode.SUCCESS) == (status is GetMessageStatus.FOUND)


@pytest.mark.parametrize("status", list(PutMessageStatus))
def test_a_send_back_succeeds_once_its_retry_is_stored(status: PutMessageStatus) -> None:
    if status in STORED:
        assert send_back_response(status) == (ResponseCode.SUCCESS, None)
    else:
        assert send_back_response(status) == (ResponseCode.SYSTEM_ERROR, status.name)
