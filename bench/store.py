"""Store throughput and latency, beside a raw loop that does the unavoidable work in-process.

Puts 1 KiB messages into a real store (1 and 64 concurrent producers, ASYNC_FLUSH and SYNC_FLUSH)
and reports msgs/s, MB/s, p50/p99 put latency, flushes per message and RSS. The raw loop encodes
the same records and copies them into an mmap (the ASYNC floor), then fdatasyncs at the group
sizes the store reached (the SYNC floor). Targets (printed, not asserted): ASYNC 64 producers
>= 100k msgs/s and >= 50% of the raw loop; SYNC 64 >= 70% of ASYNC 64; SYNC 1 producer p99 <= 2x
the raw fdatasync p99.

    .venv/bin/python bench/store.py [--messages N] [--sync-messages N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import mmap
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import structlog
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import peak_rss_mib, percentile, report, rss_mib
from store.commit_log import DefaultAppendMessageCallback
from store.config import FlushDiskType, MessageStoreConfig
from store.encode import encode_batch
from store.mapped_file import MappedFile, create_segment_file
from store.message import MessageExtBrokerInner
from store.message_store import DefaultMessageStore
from store.status import PutMessageStatus

BODY = b"m" * 1024
PROPERTIES = (
    "TAGS\x01TagA\x02KEYS\x01order\x02UNIQ_KEY\x017F0000011A2B18B4AAC2000000000001"
    "\x02CLUSTER\x01DefaultCluster"
)
SEGMENT = 1 << 30


def message(n: int, wait: bool = True) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic="BenchTopic",
        queue_id=n % 8,
        body=BODY,
        properties_string=PROPERTIES,
        born_timestamp=1700000000000 + n,
        born_host=("10.0.0.7", 50000),
        store_host=("10.0.0.1", 10911),
        wait_store_msg_ok=wait,
    )


@dataclasses.dataclass
class Run:
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    flushes_per_msg: float


async def run_store(root: str, flush: FlushDiskType, producers: int, total: int) -> Run:
    config = MessageStoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=SEGMENT, flush_disk_type=flush
    )
    latencies: list[float] = []
    per_producer = total // producers
    async with DefaultMessageStore.open(config) as store:

        async def produce(producer: int) -> None:
            clock = time.perf_counter
            for i in range(per_producer):
                msg = message(producer * per_producer + i)
                started = clock()
                result = await store.put_message(msg)
                latencies.append(clock() - started)
                if result.status is not PutMessageStatus.PUT_OK:
                    raise RuntimeError(f"put failed: {result.status}")

        flushes_before = store.flush_count
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for producer in range(producers):
                nursery.start_soon(produce, producer)
        elapsed = time.perf_counter() - started
        flushes = store.flush_count - flushes_before
        wrote = store.written_offset
    latencies.sort()
    count = per_producer * producers
    return Run(
        count / elapsed,
        wrote / elapsed / 1e6,
        percentile(latencies, 0.5) * 1e3,
        percentile(latencies, 0.99) * 1e3,
        flushes / count,
    )


def raw_copy_loop(root: str, total: int) -> float:
    """msgs/s of encode + copy into an mmap + patch offsets: the floor of the ASYNC path."""
    path = os.path.join(root, "00000000000000000000")
    create_segment_file(path, SEGMENT)
    segment = MappedFile(path, SEGMENT)
    callback = DefaultAppendMessageCallback({})
    started = time.perf_counter()
    for n in range(total):
        batch = encode_batch([message(n)], 1700000000000, 4 << 20)
        assert not isinstance(batch, PutMessageStatus)
        callback.do_append(segment, batch, 1700000000001)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    segment.destroy()
    return total / elapsed


def raw_fdatasync(root: str, group: int, rounds: int) -> tuple[float, float]:
    """(p50, p99) ms of fdatasync after appending `group` 1 KiB records into an mmap."""
    path = os.path.join(root, "raw-sync")
    create_segment_file(path, SEGMENT)
    fd = os.open(path, os.O_RDWR)
    mapping = mmap.mmap(fd, SEGMENT)
    record = bytes(1200)
    position = 0
    samples = []
    for _ in range(rounds):
        for _ in range(group):
            mapping[position : position + len(record)] = record
            position += len(record)
        started = time.perf_counter()
        os.fdatasync(fd)
        samples.append(time.perf_counter() - started)
    mapping.close()
    os.close(fd)
    os.unlink(path)
    samples.sort()
    return percentile(samples, 0.5) * 1e3, percentile(samples, 0.99) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--sync-messages", type=int, default=20_000)
    parser.add_argument("--dir", default=str(Path(__file__).resolve().parent / "out"))
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    os.makedirs(args.dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="store-bench-", dir=args.dir)
    try:
        raw = raw_copy_loop(base, args.messages)
        report("store raw_copy_loop", msgs_per_s=raw)
        runs: dict[tuple[str, int], Run] = {}
        for flush, total in (
            (FlushDiskType.ASYNC_FLUSH, args.messages),
            (FlushDiskType.SYNC_FLUSH, args.sync_messages),
        ):
            for producers in (1, 64):
                root = os.path.join(base, f"{flush.value}-{producers}")
                os.sync()  # the previous run's dirty pages must not be written back during this one
                run = trio.run(
                    run_store, root, flush, producers, total if producers > 1 else total // 4
                )
                runs[(flush.value, producers)] = run
                report(
                    f"store {flush.value} producers={producers}",
                    **dataclasses.asdict(run),
                    rss_mib=rss_mib(),
                )
                shutil.rmtree(root)
        for producers in (1, 64):
            sync = runs[("SYNC_FLUSH", producers)]
            group = max(1, round(1 / sync.flushes_per_msg)) if sync.flushes_per_msg else 1
            os.sync()
            p50, p99 = raw_fdatasync(base, group, 2000 if producers == 1 else 500)
            report(f"store raw_fdatasync group={group}", p50_ms=p50, p99_ms=p99)
            if producers == 1:
                report("target sync1_p99_vs_raw<=2", ratio=sync.p99_ms / p99)
        async64, sync64 = runs[("ASYNC_FLUSH", 64)], runs[("SYNC_FLUSH", 64)]
        report("target async64_msgs_per_s>=100000", value=async64.msgs_per_s)
        report("target async64_vs_raw>=0.5", ratio=async64.msgs_per_s / raw)
        report("target sync64_vs_async64>=0.7", ratio=sync64.msgs_per_s / async64.msgs_per_s)
        report("store memory", rss_mib=rss_mib(), peak_rss_mib=peak_rss_mib())
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
