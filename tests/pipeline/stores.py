"""Stores for the pipeline tests, written by the real `DefaultMessageStore` with small segments.

`Put` remembers what was handed to the store and where it landed (from the offset msg id), so a
test can compare every column with what was put.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from store import layout
from store.config import MessageStoreConfig
from store.message import (
    COMPRESSED_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    MessageExtBrokerInner,
)
from store.message_store import DefaultMessageStore

SEGMENT_BYTES = 64 * 1024
SHORT_BLANK = 40  # an end-of-file BLANK shorter than the 88-byte header


@dataclass(frozen=True, slots=True)
class Put:
    """One stored message: what was put and its physical offset."""

    msg: MessageExtBrokerInner
    offset: int


def config(root: str, **changes: object) -> MessageStoreConfig:
    base = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=SEGMENT_BYTES)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def message(
    index: int, topic: str | None = None, body_size: int | None = None
) -> MessageExtBrokerInner:
    size = (index * 37) % 700 + 1 if body_size is None else body_size
    return MessageExtBrokerInner(
        topic=topic or f"topic-{index % 3}",
        queue_id=index % 4,
        body=(f"{index}:".encode() * size)[:size],
        properties_string=f"TAGS\x01tag{index % 5}\x02KEYS\x01key-{index}\x02CLUSTER\x01c\x02",
        flag=index % 7,
        born_timestamp=1_700_000_000_000 + index,
        born_host=("10.1.2.3", 50000 + index % 10),
        store_host=("127.0.0.1", 10911),
    )


def offsets_of(result: object) -> list[int]:
    """Physical offsets of the records of a put result (the tail of each offset msg id)."""
    append = result.append_result  # type: ignore[attr-defined]
    assert result.is_ok and append is not None, result  # type: ignore[attr-defined]
    return [int(msg_id[-16:], 16) for msg_id in append.msg_ids]


async def put_all(store: DefaultMessageStore, msgs: Sequence[MessageExtBrokerInner]) -> list[Put]:
    puts: list[Put] = []
    for msg in msgs:
        puts += [Put(msg, offset) for offset in offsets_of(await store.put_message(msg))]
    return puts


async def put_short_blank(store: DefaultMessageStore, index: int) -> list[Put]:
    """Fill the current segment so exactly SHORT_BLANK bytes remain, then one more message,
    which the store must move to the next segment behind a BLANK shorter than a header."""
    remaining = SEGMENT_BYTES - store.max_offset % SEGMENT_BYTES
    filler = message(index, topic="filler", body_size=0)
    overhead = layout.cal_msg_length(
        0, 0, len(filler.topic.encode()), len(filler.properties_string.encode())
    )
    body = remaining - SHORT_BLANK - overhead
    if body < 0:  # not enough room left: move to a fresh segment first
        return await put_all(store, [message(index, body_size=remaining)]) + await put_short_blank(
            store, index + 1
        )
    filler.body = bytes(body)
    puts = await put_all(store, [filler])
    assert SEGMENT_BYTES - store.max_offset % SEGMENT_BYTES == SHORT_BLANK
    return puts + await put_all(store, [message(index + 1)])


def special_messages(start: int) -> list[MessageExtBrokerInner]:
    """IPv6 hosts, a compressed body and a transaction (half, then its commit record)."""
    v6 = message(start, topic="special")
    v6.born_host, v6.store_host = ("2001:db8::5", 40001), ("::1", 10911)
    compressed = message(start + 1, topic="special")
    compressed.body = zlib.compress(b"compressible " * 500)
    compressed.sys_flag = COMPRESSED_FLAG | 0x300
    half = message(start + 2, topic="special")
    half.sys_flag = TRANSACTION_PREPARED_TYPE
    return [v6, compressed, half]


async def write_mixed(root: str, count: int) -> list[Put]:
    """`count` ordinary messages plus a batch, a short blank and the special records."""
    async with DefaultMessageStore.open(config(root)) as store:
        puts = await put_all(store, [message(i) for i in range(count // 2)])
        batch = [message(10_000 + i, topic="batch") for i in range(10)]
        for msg in batch:
            msg.queue_id = 1
        result = await store.put_messages(batch)
        puts += [Put(m, o) for m, o in zip(batch, offsets_of(result), strict=True)]
        puts += await put_short_blank(store, 20_000)
        specials = special_messages(30_000)
        puts += await put_all(store, specials)
        commit = message(30_003, topic="special")
        commit.sys_flag, commit.prepared_transaction_offset = (
            TRANSACTION_COMMIT_TYPE,
            puts[-1].offset,
        )
        puts += await put_all(store, [commit])
        puts += await put_all(store, [message(i) for i in range(count // 2, count)])
    return puts


async def append(root: str, msgs: Sequence[MessageExtBrokerInner], **changes: object) -> list[Put]:
    async with DefaultMessageStore.open(config(root, **changes)) as store:
        return await put_all(store, msgs)


def write_mixed_sync(root: str, count: int) -> list[Put]:
    return trio.run(write_mixed, root, count)


def append_sync(root: str, msgs: Sequence[MessageExtBrokerInner]) -> list[Put]:
    return trio.run(append, root, msgs)


def property_value(properties: str, name: str) -> str | None:
    """The first value of `name` in a raw properties string (`k\\x01v\\x02...`), or None."""
    for pair in properties.split("\x02"):
        key, sep, value = pair.partition("\x01")
        if sep and key == name:
            return value
    return None
