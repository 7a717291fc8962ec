"""Typed headers of the transaction requests, with the codec of `consumer_headers`.

END_TRANSACTION (37) comes from a producer: the half message's queue offset in the half topic
(`tranStateTableOffset`) and commit-log offset, COMMIT (8), ROLLBACK (12) or NOT_TYPE (0, "still
unknown"), and whether it answers a check. CHECK_TRANSACTION_STATE (39) goes from the broker to a
producer of the half message's group, with the half message itself in the body.
"""

from __future__ import annotations

from dataclasses import dataclass

from .consumer_headers import Long, _ExtFieldsHeader  # the codec of the off-hot-path headers


@dataclass(frozen=True, slots=True)
class EndTransactionRequestHeader(_ExtFieldsHeader):
    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: int
    from_transaction_check: bool = False
    msg_id: str | None = None
    transaction_id: str | None = None


@dataclass(frozen=True, slots=True)
class CheckTransactionStateRequestHeader(_ExtFieldsHeader):
    tran_state_table_offset: Long
    commit_log_offset: Long
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
