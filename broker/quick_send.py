"""The work behind `rmq-broker send` and `rmq-broker health`, over the client stub.

`run_quick_send` asks the name server (or the broker itself) for the topic's route, connects to
the master broker it names and sends `count` messages, `concurrency` in flight, then prints one
JSON summary line. `check_health` sends GET_BROKER_CLUSTER_INFO and checks the answer.
"""

from __future__ import annotations

import json
import time

import trio

from broker.client import Message, Producer, SendError, open_producer
from protocol.codes import ResponseCode
from protocol.errors import RemotingProtocolError


async def _broker_address(namesrv_host: str, namesrv_port: int, topic: str) -> tuple[str, int]:
    async with open_producer(namesrv_host, namesrv_port) as namesrv:
        try:
            route = await namesrv.get_route(topic)
        except SendError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            route = await namesrv.get_route("TBW102")
    for broker in route.broker_datas:
        master = broker.broker_addrs.get(0)
        if master:
            host, _, port = master.rpartition(":")
            return host, int(port)
    raise SendError(ResponseCode.TOPIC_NOT_EXIST, f"no master broker in the route of {topic}")


async def run_quick_send(
    namesrv_host: str,
    namesrv_port: int,
    topic: str,
    *,
    count: int,
    size: int,
    concurrency: int,
    tags: str | None,
) -> bool:
    """Send, print a one-line JSON summary (sent, failed, rate, first error); True if all ok."""
    host, port = await _broker_address(namesrv_host, namesrv_port, topic)
    body = (b"rmq-broker " * (size // 11 + 1))[:size]
    failures: list[str] = []
    indexes = iter(range(count))
    started = time.perf_counter()

    async def worker(producer: Producer) -> None:
        for index in indexes:  # shared: each index is sent by exactly one worker
            try:
                await producer.send(Message(topic, body, tags=tags, keys=f"quick-{index}"))
            except Exception as exc:
                failures.append(str(exc))

    async with open_producer(host, port) as producer, trio.open_nursery() as nursery:
        for _ in range(min(concurrency, count)):
            nursery.start_soon(worker, producer)
    seconds = time.perf_counter() - started
    summary = {
        "broker": f"{host}:{port}",
        "sent": count - len(failures),
        "failed": len(failures),
        "seconds": round(seconds, 3),
        "per_second": round(count / seconds, 1) if seconds > 0 else None,
        "first_error": failures[0] if failures else None,
    }
    print(json.dumps(summary))
    return not failures


async def check_health(host: str, port: int, timeout_s: float) -> str | None:
    """None when the broker answers correctly, else what went wrong."""
    try:
        with trio.fail_after(timeout_s):
            async with open_producer(host, port, timeout_s=timeout_s) as client:
                info = await client.get_cluster_info()
    except trio.TooSlowError:
        return f"no answer within {timeout_s} s"
    except (OSError, SendError, RemotingProtocolError, Exception) as exc:
        return f"{type(exc).__name__}: {exc}"
    if not info.broker_addr_table:
        return "cluster info lists no broker"
    return None
