"""A producer process for the crash tests: SYNC_FLUSH puts from several tasks, printing
`<sequence> <physical offset>` for every acknowledged message until it is killed."""

from __future__ import annotations

import sys

import structlog
import trio

from store.config import FlushDiskType, MessageStoreConfig
from store.message import MessageExtBrokerInner
from store.message_store import DefaultMessageStore
from store.status import PutMessageStatus

SEGMENT = 64 * 1024
PRODUCERS = 8


def crash_config(store_dir: str) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=store_dir,
        mapped_file_size_commit_log=SEGMENT,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        checkpoint_interval_ms=100,
    )


async def main(store_dir: str, first: int) -> None:
    async with DefaultMessageStore.open(crash_config(store_dir)) as store:
        print("ready", store.max_offset, flush=True)

        async def produce(producer: int) -> None:
            sequence = first + producer
            while True:
                body = b"seq:%d:" % sequence + b"p" * (sequence % 700)
                msg = MessageExtBrokerInner("crash", sequence % 4, body, "KEYS\x01k")
                result = await store.put_message(msg)
                if result.status is PutMessageStatus.PUT_OK and result.append_result is not None:
                    print(sequence, result.append_result.wrote_offset, flush=True)
                sequence += PRODUCERS

        async with trio.open_nursery() as nursery:
            for producer in range(PRODUCERS):
                nursery.start_soon(produce, producer)


if __name__ == "__main__":
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    trio.run(main, sys.argv[1], int(sys.argv[2]))
