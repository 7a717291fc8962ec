"""Send through a running Compose cluster and consume everything back (deploy/container-test.sh).

    python deploy/compose_check.py --namesrv 127.0.0.1:9876 --namesrv 127.0.0.1:9877 \
        --broker broker-a=127.0.0.1:10911 --broker broker-b=127.0.0.1:10921 \
        --slave broker-a=127.0.0.1:10931 --topic T --count 20

1. waits until every name server lists every broker group, and each slave as broker id 1 of
   its group (registration over the compose network);
2. sends `count` messages to each broker group's master on its published port;
3. pulls every queue of each broker from offset 0 and checks that all keys came back, once,
   from the broker they were sent to, and commits the consumer offsets;
4. waits until each slave's queues reach the same max offsets as its master's.
Prints one JSON summary line; exit 0 when all checks pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import trio

from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer

GROUP = "ComposeCheckGroup"


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def wait_registered(
    namesrvs: list[str], brokers: dict[str, str], slaves: dict[str, str], timeout_s: float
) -> None:
    wanted = {(name, 0) for name in brokers} | {(name, 1) for name in slaves}
    with trio.move_on_after(timeout_s):
        while True:
            seen: list[set[tuple[str, int]]] = []
            for namesrv in namesrvs:
                try:
                    async with open_producer(*_address(namesrv), timeout_s=3.0) as client:
                        info = await client.get_cluster_info()
                    seen.append(
                        {
                            (name, broker_id)
                            for name, data in info.broker_addr_table.items()
                            for broker_id in data.broker_addrs
                        }
                    )
                except (OSError, trio.TooSlowError):
                    seen.append(set())
            if all(wanted <= names for names in seen):
                return
            await trio.sleep(0.5)
    raise SystemExit(f"not every name server lists {sorted(wanted)} after {timeout_s} s")


async def send(address: str, topic: str, name: str, count: int) -> set[int]:
    queues: set[int] = set()
    async with open_producer(*_address(address)) as producer:
        for index in range(count):
            key = f"{name}-{index}"
            result = await producer.send(Message(topic, key.encode(), keys=key))
            queues.add(result.queue_id)
    return queues


async def wait_replicated(
    master: str, slave: str, topic: str, queues: set[int], timeout_s: float
) -> dict[int, int]:
    """Each queue's max offset on the slave once it equals the master's (or raises)."""
    async with (
        open_pull_consumer(*_address(master), GROUP) as on_master,
        open_pull_consumer(*_address(slave), GROUP) as on_slave,
    ):
        wanted = {q: await on_master.max_offset(topic, q) for q in sorted(queues)}
        seen: dict[int, int] = {}
        with trio.move_on_after(timeout_s):
            while True:
                seen = {q: await on_slave.max_offset(topic, q) for q in sorted(queues)}
                if seen == wanted:
                    return seen
                await trio.sleep(0.5)
    raise SystemExit(f"slave {slave} has {seen} of {topic}, master {wanted} after {timeout_s} s")


async def consume(address: str, topic: str, queues: set[int]) -> list[str]:
    keys: list[str] = []
    async with open_pull_consumer(*_address(address), GROUP) as consumer:
        await consumer.subscribe(topic)
        for queue_id in sorted(queues):
            offset = 0
            while True:
                result = await consumer.pull(topic, queue_id, offset)
                if not result.found:
                    break
                keys.extend((record.body or b"").decode() for record in result.records)
                offset = result.next_begin_offset
            await consumer.commit(topic, queue_id, offset)
    return keys


async def run(args: argparse.Namespace) -> dict[str, object]:
    brokers = dict(item.split("=", 1) for item in args.broker)
    slaves = dict(item.split("=", 1) for item in args.slave)
    await wait_registered(args.namesrv, brokers, slaves, args.timeout)
    summary: dict[str, object] = {"topic": args.topic}
    problems: list[str] = []
    for name, address in brokers.items():
        queues = await send(address, args.topic, name, args.count)
        keys = await consume(address, args.topic, queues)
        expected = {f"{name}-{i}" for i in range(args.count)}
        doubled = sorted(k for k, n in Counter(keys).items() if n > 1)
        if set(keys) != expected or doubled:
            problems.append(f"{name}: consumed {len(keys)} keys, doubled {doubled[:5]}")
        summary[name] = {"sent": args.count, "consumed": len(keys), "queues": sorted(queues)}
        if name in slaves:
            offsets = await wait_replicated(address, slaves[name], args.topic, queues, args.timeout)
            summary[f"{name}-slave"] = {"replicated": sum(offsets.values())}
    summary["problems"] = problems
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", action="append", required=True)
    parser.add_argument("--broker", action="append", required=True, help="NAME=HOST:PORT")
    parser.add_argument("--slave", action="append", default=[], help="NAME=HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    summary = trio.run(run, args)
    print(json.dumps(summary))
    sys.exit(1 if summary["problems"] else 0)


if __name__ == "__main__":
    main()
