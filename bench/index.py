"""CPU the message index spends per record, a run at a time (numpy) and record by record.

Writes a store of 1 KiB messages with a UNIQ_KEY and one KEYS entry each (what bench/send.py
sends) with the index off, then builds the index over it with `IndexService.build_batch` in
batches of N records, as the broker's index task does, with the default index limits (5 million
slots, 20 million items). Prints CPU microseconds per record (process time: user + system) and
checks that both paths wrote the same bytes. numpy's import is not counted.

    .venv/bin/python bench/index.py [--messages N] [--batches 100,500,4096] [--dir PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import structlog
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.properties import encode_properties
from store.config import MessageStoreConfig
from store.index import batch as _batch  # noqa: F401 (imported here: its import is not timed)
from store.index.service import CHECKPOINT_FILE, INDEX_DIR, IndexService
from store.message import MessageExtBrokerInner
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader

BODY = b"m" * 1024


async def write_store(root: str, messages: int) -> None:
    base = MessageStoreConfig(store_path_root_dir=root)
    config = dataclasses.replace(base, message_index_enable=False)
    async with DefaultMessageStore.open(config) as store:
        for n in range(messages):
            connection = n % 8
            properties = encode_properties(
                {
                    "TAGS": "TagA",
                    "KEYS": f"order_{connection}_{n}",
                    "UNIQ_KEY": f"7F000001{connection:04X}18B4AAC2{n:012X}",
                    "WAIT": "true",
                }
            )
            msg = MessageExtBrokerInner(
                topic="BenchTopic", queue_id=connection % 4, body=BODY, properties_string=properties
            )
            await store.put_message(msg)


def build(root: str, ends: list[int], step: int, *, vectorised: bool) -> tuple[float, str]:
    """CPU microseconds per record to index the store in batches of `step` records, and a
    digest of the newest file's used bytes."""
    shutil.rmtree(os.path.join(root, INDEX_DIR), ignore_errors=True)
    Path(root, CHECKPOINT_FILE).unlink(missing_ok=True)
    config = MessageStoreConfig(store_path_root_dir=root)
    service = IndexService.open(
        root,
        config.max_hash_slot_num,
        config.max_index_num,
        log_min=0,
        log_max=ends[-1],
        abnormal=False,
    )
    service.vectorised = vectorised
    started = time.process_time()
    for stop in [*ends[step - 1 :: step], ends[-1]]:
        while service.indexed_offset < stop:
            service.build_batch(stop)
    spent = time.process_time() - started
    service.save(force=True)
    newest = service.files[-1]
    used = 40 + newest.hash_slot_num * 4 + newest.count * 20
    digest = hashlib.sha256(newest.mm[:used]).hexdigest()[:16]
    service.close()
    return spent * 1e6 / len(ends), digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batches", default="100,500,4096", help="records per batch")
    parser.add_argument("--dir", default=None, help="where the store goes (a temporary dir)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    work = tempfile.mkdtemp(prefix="bench-index-", dir=args.dir)
    root = os.path.join(work, "store")
    try:
        trio.run(write_store, root, args.messages)
        with CommitLogReader(root) as reader:
            ends = [r.physical_offset + r.total_size for r in reader.iter_records(0)]
        for step in (int(s) for s in args.batches.split(",")):
            runs, digest = build(root, ends, step, vectorised=True)
            keys, expected = build(root, ends, step, vectorised=False)
            print(
                f"index batch={step} records={len(ends)} cpu_us_per_record_runs={runs:.2f} "
                f"cpu_us_per_record_keys={keys:.2f} same_bytes={digest == expected}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
