"""The client side of QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33), over a `Producer`'s
connection: what `rmq-broker query` and the tests ask a running broker.

A query's answer is the matching records laid end to end, decoded here with the commit log's
own decoder; VIEW_MESSAGE_BY_ID takes the commit-log offset an offset message id carries
(`protocol.msgid.decode_offset_msg_id`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from rmq_client.producer import Producer
from store.decode import CommitLogRecord, decode_copied_records

#: the end of time, for a query with no upper bound
LATEST: Final = (1 << 63) - 1


class QueryError(Exception):
    """The broker answered neither with records nor with "not found"."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark or ''}")
        self.code = code
        self.remark = remark


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    records: list[CommitLogRecord]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


async def query_by_key(
    conn: Producer,
    topic: str,
    key: str,
    *,
    max_num: int = 32,
    begin: int = 0,
    end: int = LATEST,
    unique: bool = False,
) -> QueryAnswer:
    """The records of `topic` with `key` (a KEYS entry or, `unique`, the UNIQ_KEY); an empty
    answer for QUERY_NOT_FOUND, QueryError for any other refusal."""
    ext = QueryMessageRequestHeader(topic, key, max_num, begin, end).to_ext_fields()
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    response = await conn.request(RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext))
    if response.code not in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND):
        raise QueryError(response.code, response.remark)
    header = QueryMessageResponseHeader.from_ext_fields(response.ext_fields)
    found = response.code == ResponseCode.SUCCESS and response.body
    return QueryAnswer(
        decode_copied_records(response.body) if found and response.body else [],
        header.index_last_update_timestamp,
        header.index_last_update_phyoffset,
    )


async def view_by_offset(conn: Producer, offset: int) -> CommitLogRecord | None:
    """The record at commit-log `offset`; None when the broker finds none there."""
    ext = ViewMessageRequestHeader(offset).to_ext_fields()
    response = await conn.request(RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, ext))
    if response.code == ResponseCode.SYSTEM_ERROR:
        return None
    if response.code != ResponseCode.SUCCESS or not response.body:
        raise QueryError(response.code, response.remark)
    records = decode_copied_records(response.body)
    return records[0] if records else None
