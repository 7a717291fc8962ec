"""Pop consumption throughput beside pull throughput, on the same broker and messages.

Starts `rmq-broker serve` (a subprocess, loopback, a fresh store), sends `--messages` 1 KiB
messages to 4 queues (`bench.consume`'s sender), reads them all back with pulls of 32 (one
group), then with pops of 32 and one ACK_MESSAGE per message (another group, one task per
queue, 60 s invisible time): every pop also stores a checkpoint and every ack an ack record in
the revive topic. Prints send, pull and pop+ack msgs/s.
Usage: `python bench/pop.py [--flush-disk-type SYNC_FLUSH|ASYNC_FLUSH] [--messages 20000]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import trio

from bench._common import report, rss_mib
from bench.consume import QUEUES, pull_throughput, send_throughput, start_broker
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.pop_headers import AckMessageRequestHeader, PopMessageRequestHeader
from protocol.properties import decode_properties
from rmq_client.producer import Producer, open_producer
from store.decode import decode_copied_records

TOPIC = "BenchThroughput"
GROUP = "bench-pop"


async def pop_queue(
    conn: Producer, queue_id: int, *, topic: str = TOPIC, group: str = GROUP, batch: int = 32
) -> int:
    """Pop and ack queue `queue_id` until a pop finds nothing; how many were acked."""
    acked = 0
    pop = PopMessageRequestHeader(group, topic, queue_id, batch, 60_000, 0, 0, 0, "TAG", "*")
    while True:
        command = RemotingCommand.request(RequestCode.POP_MESSAGE, pop.to_ext_fields())
        response = await conn.request(command)
        if response.code != ResponseCode.SUCCESS:
            return acked
        for record in decode_copied_records(response.body or b""):
            receipt = decode_properties(record.properties)["POP_CK"]
            ack = AckMessageRequestHeader(group, topic, queue_id, receipt, record.queue_offset)
            answer = await conn.request(
                RemotingCommand.request(RequestCode.ACK_MESSAGE, ack.to_ext_fields())
            )
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"ack refused: {answer.code} {answer.remark}")
            acked += 1


async def pop_throughput(port: int) -> tuple[float, int]:
    totals = [0] * QUEUES
    started = time.perf_counter()

    async def one(queue_id: int) -> None:
        async with open_producer("127.0.0.1", port) as conn:
            totals[queue_id] = await pop_queue(conn, queue_id)

    async with trio.open_nursery() as nursery:
        for queue_id in range(QUEUES):
            nursery.start_soon(one, queue_id)
    total = sum(totals)
    return total / (time.perf_counter() - started), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flush-disk-type", default="ASYNC_FLUSH")
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pop-bench-") as store_dir:
        process, port = start_broker(store_dir, args.flush_disk_type)
        try:
            send_rate = trio.run(send_throughput, port, args.messages)
            pull_rate, pulled = trio.run(pull_throughput, port)
            pop_rate, popped = trio.run(pop_throughput, port)
            report(
                "pop_throughput",
                mode=args.flush_disk_type,
                send_msgs_s=send_rate,
                pull_msgs_s=pull_rate,
                pulled=pulled,
                pop_ack_msgs_s=pop_rate,
                popped=popped,
                broker_rss_mib=rss_mib(process.pid),
            )
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
