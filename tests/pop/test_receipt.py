"""Receipt handles (5.x's extra info): what `encode` writes `parse` reads back, field for
field, and any other text raises `ReceiptError`, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.pop.receipt import Receipt, ReceiptError, pop_retry_topic

longs = st.integers(0, (1 << 63) - 1)
ints = st.integers(0, (1 << 31) - 1)
names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)


receipts = st.builds(Receipt, longs, longs, longs, ints, st.sampled_from("012"), names, ints, longs)


@given(receipts)
def test_a_receipt_reads_back_as_written(receipt: Receipt) -> None:
    assert Receipt.parse(receipt.encode()) == receipt


@given(st.text(max_size=200))
def test_any_other_text_raises_the_receipt_error(text: str) -> None:
    try:
        receipt = Receipt.parse(text)
    except ReceiptError:
        return
    assert receipt.encode() == text  # whatever parses is a receipt that encodes to itself


def test_the_5x_layout_of_the_fields() -> None:
    receipt = Receipt.parse("7 1700000000000 60000 3 1 broker-a 2 9")
    assert (receipt.ck_offset, receipt.pop_time) == (7, 1700000000000)
    assert receipt.invisible_time == 60000
    assert (receipt.revive_qid, receipt.broker_name, receipt.queue_id) == (3, "broker-a", 2)
    assert receipt.queue_offset == 9
    assert receipt.revive_time == 1700000060000
    assert receipt.real_topic("T", "g") == pop_retry_topic("T", "g") == "%RETRY%g_T"
    assert Receipt.parse("7 1 1 3 0 b 2 9").real_topic("T", "g") == "T"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "8 fields"),
        ("1 2 3 4 0 b 5", "8 fields"),
        ("1 2 3 4 0 b 5 6 7", "8 fields"),
        ("x 2 3 4 0 b 5 6", "ckQueueOffset"),
        ("1 2 3 4 9 b 5 6", "topic kind"),
        ("1 2 3 4 0  5 6", "no broker"),
        ("1 2 3 4294967296 0 b 5 6", "reviveQid"),
        ("1 2 3 4 0 b -5 6", "queueId"),
        ("1 2 3 4 0 b 5 99999999999999999999", "queueOffset"),
        ("1 2 3 4 0 b 5 ٣", "queueOffset"),
    ],
)
def test_a_malformed_receipt_names_its_fault(text: str, complaint: str) -> None:
    with pytest.raises(ReceiptError, match=complaint):
        Receipt.parse(text)
