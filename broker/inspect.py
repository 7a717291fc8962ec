"""`rmq-broker inspect`: the commit log's records as JSON lines, via `store.reader`.

Reads only up to the durable offset the store publishes in `flushoffset`, so it is safe while a
broker writes the same directory. A `--from-offset` inside a record resynchronises at the next
record start. Knows nothing of sockets.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from protocol.properties import MessageConst, decode_properties
from store.decode import CommitLogRecord
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
