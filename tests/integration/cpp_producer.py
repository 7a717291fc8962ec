"""Drive the official C++ client (PyPI `rocketmq`, librocketmq) against a broker.

Run as a separate process so the native library's threads cannot outlive or hang the test run.
Usage: `python cpp_producer.py HOST:PORT TOPIC COUNT`; prints one JSON object per send result
on stdout: {"kind", "index", "status", "msg_id", "offset"}.
"""

from __future__ import annotations

import json
import sys

from rocketmq.client import Message, Producer

LARGE_BODY_EVERY = 10
LARGE_BODY_SIZE = 8 * 1024  # above the client's 4 KiB compression threshold
BATCH_SIZE = 5


def body_of(index: int) -> bytes:
    """The body of message `index`: small and unique, or 8 KiB of compressible text."""
    if index % LARGE_BODY_EVERY == 0:
        return (f"large-{index}-".encode() * LARGE_BODY_SIZE)[:LARGE_BODY_SIZE]
    return f"body-{index}".encode()


def message(topic: str, index: int) -> Message:
    msg = Message(topic)
    msg.set_tags(f"Tag{index % 3}")
    msg.set_keys(f"key-{index}")
    msg.set_property("seq", str(index))
    msg.set_body(body_of(index))
    return msg


def emit(kind: str, index: int, result: tuple[int, str, int]) -> None:
    status, msg_id, offset = result
    line = {"kind": kind, "index": index, "status": int(status), "msg_id": msg_id}
    print(json.dumps({**line, "offset": offset}), flush=True)


def main() -> None:
    address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = Producer("cpp_interop_producer", timeout=5000)
    producer.set_namesrv_addr(address)
    producer.start()
    try:
        for index in range(count):
            emit("sync", index, producer.send_sync(message(topic, index)))
        batch = [message(topic, count + i) for i in range(BATCH_SIZE)]
        # Batches are never compressed by the client: give every entry a small body.
        for i, msg in enumerate(batch):
            msg.set_body(f"batch-{count + i}".encode())
        emit("batch", count, producer.send_batch(batch))
        oneway_index = count + BATCH_SIZE
        producer.send_oneway(message(topic, oneway_index))
        print(json.dumps({"kind": "oneway", "index": oneway_index}), flush=True)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
