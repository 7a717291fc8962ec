"""Restart time of a store after a clean stop, as the store grows.

Builds stores of increasing size (small records over many queues, 1 GiB segments as the default
configuration has them), stops each cleanly, then times `DefaultMessageStore.open` (recovery,
consume queues, services started) and a real `rmq-broker serve` until its first answered request,
on a warm page cache. Restart time should not grow with the store: RocketMQ recovers from the
checkpoint and scans only the last segments. Prints one row per size:

    .venv/bin/python bench/restart.py [--records 500000,3000000] [--queues 64] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import structlog
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import report
from rmq_client.quick_send import check_health
from store.config import MessageStoreConfig
from store.message import MessageExtBrokerInner
from store.message_store import DefaultMessageStore
from store.status import PutMessageStatus

BATCH = 256
BODY = b"r" * 100


async def build(config: MessageStoreConfig, records: int, queues: int) -> None:
    async with DefaultMessageStore.open(config) as store:
        written = 0
        while written < records:
            queue_id = (written // BATCH) % queues
            batch = [
                MessageExtBrokerInner(
                    topic=f"Restart{queue_id % 16}",
                    queue_id=queue_id // 16,
                    body=BODY,
                    properties_string="TAGS\x01t\x02CLUSTER\x01DefaultCluster",
                    wait_store_msg_ok=False,
                )
                for _ in range(min(BATCH, records - written))
            ]
            result = await store.put_messages(batch)
            assert result.status is PutMessageStatus.PUT_OK, result.status
            written += len(batch)


async def open_once(config: MessageStoreConfig) -> float:
    started = time.perf_counter()
    async with DefaultMessageStore.open(config):
        opened = time.perf_counter() - started
    return opened


def serve_once(store_dir: str) -> float:
    """Seconds from starting `rmq-broker serve` on the store to its first answered request."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            store_dir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        port = None
        for line in process.stderr:  # JSON log lines: stderr is not a terminal
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "listening":
                port = int(event["port"])
                break
        assert port is not None, "the broker never listened"
        problem = trio.run(check_health, "127.0.0.1", port, 60.0)
        assert problem is None, problem
        return time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="500000,3000000")
    parser.add_argument("--queues", type=int, default=64)
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    base = tempfile.mkdtemp(prefix="rmq-restart-", dir=args.dir)
    try:
        for records in (int(n) for n in args.records.split(",")):
            store_dir = os.path.join(base, f"store-{records}")
            config = MessageStoreConfig(store_path_root_dir=store_dir)
            started = time.perf_counter()
            trio.run(build, config, records, args.queues)
            built = time.perf_counter() - started
            opens = sorted(trio.run(open_once, config) for _ in range(3))
            served = serve_once(store_dir)
            size = sum(p.stat().st_size for p in Path(store_dir, "commitlog").iterdir())
            report(
                "restart",
                records=records,
                queues=args.queues,
                commitlog_mib=round(size / (1 << 20)),
                build_s=built,
                open_s=opens[1],
                serve_to_first_answer_s=served,
            )
            shutil.rmtree(store_dir)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
