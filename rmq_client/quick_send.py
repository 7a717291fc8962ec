"""The work behind `rmq-broker send` and `rmq-broker health`, over the client stub.

`run_quick_send` asks the name server (or the broker itself) for the topic's route, connects to
the master broker it names and sends `count` messages, `concurrency` in flight, then prints one
JSON summary line. `check_health` sends GET_BROKER_CLUSTER_INFO and checks the answer.
"""

from __future__ import annotations

import json
import math
import time
from functools import partial
from typing import Any

import trio

from protocol.codes import ResponseCode
from protocol.errors import RemotingProtocolError
from rmq_client.producer import ConnectionClosedError, Message, Producer, SendError, open_producer

#: what a peer that cannot be reached or talked to raises, alone or inside an exception group
_UNREACHABLE = (OSError, trio.TooSlowError, ConnectionClosedError, RemotingProtocolError)


class QuickSendError(Exception):
    """The name server or the broker could not be reached; the message is the operator's line."""


def _first_unreachable(exc: BaseException) -> BaseException | None:
    """`exc`, or the first leaf of an exception group, when it says a peer cannot be reached."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = (_first_unreachable(inner) for inner in exc.exceptions)
        return next((leaf for leaf in leaves if leaf is not None), None)
    return exc if isinstance(exc, _UNREACHABLE) else None


async def _reaching(address: str, timeout_s: float, work: Any) -> Any:
    """`await work()` within `timeout_s`; failing to reach `address` raises `QuickSendError`."""
    try:
        with trio.fail_after(timeout_s):
            return await work()
    except (*_UNREACHABLE, BaseExceptionGroup) as exc:
        leaf = _first_unreachable(exc)
        if leaf is None:
            raise
        why = f"no answer within {timeout_s} s" if isinstance(leaf, trio.TooSlowError) else leaf
        raise QuickSendError(f"cannot reach {address}: {why}") from None


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
    timeout_s: float = 10.0,
) -> bool:
    """Send, print a one-line JSON summary (sent, failed, rate, first error); True if all ok.

    Raises `QuickSendError` when the name server or the broker cannot be reached in `timeout_s`.
    """
    host, port = await _reaching(
        f"{namesrv_host}:{namesrv_port}",
        timeout_s,
        partial(_broker_address, namesrv_host, namesrv_port, topic),
    )
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

    async def send_all() -> None:
        # `timeout_s` bounds the connect; then each send has its own timeout in the producer.
        with trio.CancelScope(deadline=trio.current_time() + timeout_s) as connecting:
            async with (
                open_producer(host, port, timeout_s=timeout_s) as producer,
                trio.open_nursery() as nursery,
            ):
                connecting.deadline = math.inf
                for _ in range(min(concurrency, count)):
                    nursery.start_soon(worker, producer)
        if connecting.cancelled_caught:
            raise trio.TooSlowError

    await _reaching(f"{host}:{port}", math.inf, send_all)
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
