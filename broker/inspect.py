"""`rmq-broker inspect` and `rmq-broker query --store-dir`: the commit log's records as JSON
lines, via `store.reader`.

Reads only up to the durable offset the store publishes in `flushoffset`, so it is safe while a
broker writes the same directory. A `--from-offset` inside a record resynchronises at the next
record start. A query by key reads the log itself, not the index files a running broker may be
writing, and matches the key exactly (a KEYS entry or the UNIQ_KEY, as the index would); a
query by offset finds a record only where one starts. Knows nothing of sockets.
"""

from __future__ import annotations

import base64
import collections
import json
from collections.abc import Callable
from typing import Any

from protocol.properties import MessageConst, decode_properties
from store.decode import CommitLogRecord, RecordFormatError
from store.index.index_file import index_keys
from store.message import TRANSACTION_ROLLBACK_TYPE, get_transaction_value
from store.reader import CommitLogReader


def record_json(rec: CommitLogRecord, with_body: bool) -> dict[str, Any]:
    """One record as a JSON-ready dict (properties decoded, TAGS and KEYS lifted out)."""
    props = decode_properties(rec.properties)
    body = rec.body or b""
    line: dict[str, Any] = {
        "physical_offset": rec.physical_offset,
        "total_size": rec.total_size,
        "topic": rec.topic,
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
        "tags": props.get(MessageConst.TAGS),
        "keys": props.get(MessageConst.KEYS),
        "properties": props,
        "body_length": len(body),
        "crc_ok": rec.crc_ok,
        "sys_flag": rec.sys_flag,
        "flag": rec.flag,
        "born_timestamp": rec.born_timestamp,
        "born_host": _host(rec.born_host),
        "store_timestamp": rec.store_timestamp,
        "store_host": _host(rec.store_host),
        "reconsume_times": rec.reconsume_times,
    }
    if with_body:
        line["body"] = base64.b64encode(body).decode("ascii")
    return line


def _host(host: tuple[str, int]) -> str:
    ip, port = host
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def inspect_store(
    store_dir: str,
    *,
    from_offset: int | None = None,
    topic: str | None = None,
    with_body: bool = False,
    limit: int | None = None,
    emit: Callable[[str], None] = print,
) -> int:
    """Emit one JSON line per record (optionally of one topic); return how many were emitted."""
    count = 0
    with CommitLogReader(store_dir) as reader:
        start: int | None = reader.min_offset
        if from_offset is not None:
            start = reader.next_boundary(max(from_offset, reader.min_offset))
        if start is None:
            return 0
        for rec in reader.iter_records(start, include_body=True, verify_crc=True):
            if topic is not None and rec.topic != topic:
                continue
            emit(json.dumps(record_json(rec, with_body), ensure_ascii=False))
            count += 1
            if limit is not None and count >= limit:
                break
    return count


def query_store(
    store_dir: str,
    *,
    topic: str,
    key: str,
    max_num: int,
    with_body: bool = False,
    emit: Callable[[str], None] = print,
) -> int:
    """Emit the newest `max_num` records of `topic` carrying `key`, in log order; how many."""
    found: collections.deque[CommitLogRecord] = collections.deque(maxlen=max_num)
    with CommitLogReader(store_dir) as reader:
        for rec in reader.iter_records(reader.min_offset, include_body=True, verify_crc=True):
            if (
                rec.topic == topic
                and get_transaction_value(rec.sys_flag) != TRANSACTION_ROLLBACK_TYPE
                and key in index_keys(rec.properties)
            ):
                found.append(rec)
    for rec in found:
        emit(json.dumps(record_json(rec, with_body), ensure_ascii=False))
    return len(found)


def view_store(
    store_dir: str, offset: int, *, with_body: bool = False, emit: Callable[[str], None] = print
) -> int:
    """Emit the record starting at commit-log `offset` (1), or nothing (0)."""
    with CommitLogReader(store_dir) as reader:
        if reader.next_boundary(offset) != offset:
            return 0
        try:
            rec = next(reader.iter_records(offset, include_body=True, verify_crc=True), None)
        except RecordFormatError:
            return 0
    if rec is None:
        return 0
    emit(json.dumps(record_json(rec, with_body), ensure_ascii=False))
    return 1
