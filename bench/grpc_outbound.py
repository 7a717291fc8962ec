"""What a received message costs the broker to turn into RocketMQ 5's `Message` and encode.

Builds `--messages` popped records (1 KiB bodies, a tag, two keys, a user property, a UNIQ_KEY
and a receipt handle, as a pop hands them out), converts each with `broker.grpc.outbound.to_v5`
inside a `ReceiveMessageResponse` and serializes it, as ReceiveMessage does per message. Prints
messages/s, the mean encoded size and the RSS growth of importing protobuf and the bindings.
Usage: `python bench/grpc_outbound.py [--messages 50000]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import report, rss_mib
from protocol.properties import encode_properties
from store.decode import CommitLogRecord


def records(count: int) -> list[CommitLogRecord]:
    props = encode_properties(
        {
            "TAGS": "TagA",
            "KEYS": "order-1 user-7",
            "UNIQ_KEY": "7F00000100002A9F0000000000000001",
            "color": "blue",
            "POP_CK": "0 1700000000000 60000 3 0 broker-a 1 0",
        }
    )
    body = os.urandom(1024)
    return [
        CommitLogRecord(
            i * 1200,
            1200,
            0,
            1,
            0,
            i,
            0,
            1_700_000_000_000,
            ("127.0.0.1", 50000),
            1_700_000_000_001,
            ("127.0.0.1", 10911),
            0,
            0,
            "BenchTopic",
            props,
            body,
            None,
        )
        for i in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    args = parser.parse_args()
    rows = records(args.messages)
    before = rss_mib()
    from broker.grpc.outbound import to_v5
    from protocol.v2 import load

    _, service = load()
    imported = rss_mib() - before
    size = 0
    started = time.perf_counter()
    for record in rows:
        message = to_v5(record, topic="BenchTopic", invisible_ms=60_000)
        size += len(service.ReceiveMessageResponse(message=message).SerializeToString())
    elapsed = time.perf_counter() - started
    report(
        "grpc_outbound",
        messages=args.messages,
        msgs_per_s=args.messages / elapsed,
        mean_bytes=size / args.messages,
        protobuf_import_mib=imported,
    )


if __name__ == "__main__":
    main()
