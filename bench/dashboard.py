"""What one poll of the dashboard costs the broker, at the documents' caps.

An in-process broker gets `--topics` topics of `--queues` queues, each queue holding a few
messages, and `--groups` consumer groups that committed offsets in two topics each. Then each
JSON document (`group.json` for one group) is computed R times straight on the event loop
(the time the loop spends per poll, serving no request meanwhile) and fetched R times over
HTTP (what the page waits); the figures are medians, with the document's size. The page polls
all six every 2 s.

    .venv/bin/python bench/dashboard.py [--topics N] [--queues Q] [--groups G] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import orjson
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import report
from broker.config import build_config
from broker.dashboard import http
from broker.server import BrokerServer, serve
from broker.topic_config import TopicConfig
from rmq_client.producer import Message, open_producer


def fetch(port: int, name: str, query: dict[str, str]) -> float:
    url = f"http://127.0.0.1:{port}/api/{name}.json?{urllib.parse.urlencode(query)}"
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
    return time.perf_counter() - started


async def fill(server: BrokerServer, topics: int, queues: int, groups: int) -> None:
    broker = server.broker
    names = [f"BenchTopic{n:03d}" for n in range(topics)]
    for name in names:
        broker.topics.put(TopicConfig(name, queues, queues))
    async with open_producer("127.0.0.1", server.port) as producer:
        for name in names:
            for queue_id in range(queues):
                batch = [Message(name, b"x" * 100, queue_id=queue_id) for _ in range(4)]
                await producer.send_batch(batch)
    for g in range(groups):
        for name in (names[g % topics], names[(g + 1) % topics]):
            for queue_id in range(queues):
                broker.offsets.commit(f"bench-group-{g:02d}", name, queue_id, 2)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as store_dir:
        config = build_config(
            {
                "listen": "127.0.0.1:0",
                "metrics_listen": "127.0.0.1:0",
                "grpc_listen": "none",
                "store_path_root_dir": store_dir,
                "mapped_file_size_commit_log": 64 << 20,
                "max_hash_slot_num": 5_000,
                "max_index_num": 20_000,
            }
        )
        async with trio.open_nursery() as nursery:
            server: BrokerServer = await nursery.start(serve, config)
            await fill(server, args.topics, args.queues, args.groups)
            assert server.http_port is not None
            for name, view in http.DOCUMENTS.items():
                query = {"group": "bench-group-00"} if name == "group" else {}
                loop_s = []
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    document = view(server, query)
                    loop_s.append(time.perf_counter() - started)
                size = len(orjson.dumps(document))
                http_s = [
                    await trio.to_thread.run_sync(fetch, server.http_port, name, query)
                    for _ in range(args.rounds)
                ]
                report(
                    f"dashboard_{name}",
                    loop_ms=statistics.median(loop_s) * 1000,
                    http_ms=statistics.median(http_s) * 1000,
                    kib=size / 1024,
                    topics=args.topics,
                    queues=args.queues,
                    groups=args.groups,
                )
            server.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--queues", type=int, default=16)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    trio.run(main, parser.parse_args())
