"""The consumer-group admin requests against the official C++ client (`rocketmq==0.4.4`) on a
real `rmq-broker serve`.

A C++ producer sends numbered messages; GET_CONSUME_STATS shows the group's whole backlog, then
its lag per queue falling to 0 as a C++ push consumer consumes and commits. The connection list
names the C++ client (language CPP); GET_CONSUMER_RUNNING_INFO is relayed to it and its answer
comes back. INVOKE_BROKER_TO_RESET_OFFSET to a time before the first message makes the live
C++ consumer (told with RESET_CONSUMER_CLIENT_OFFSET) read every message again.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
from rocketmq.client import PushConsumer

from protocol.admin_group import ConsumeStats
from rmq_client.admin_groups import (
    get_consume_stats,
    get_consumer_connections,
    get_consumer_running_info,
    reset_offset_by_time,
)
from rmq_client.producer import Producer, open_producer
from tests.daemon import Daemon
from tests.integration.test_cpp_consumer import Received, produce

TOPIC = "CppConsume"  # what `produce` sends to
GROUP = "cpp_admin_group"
COUNT = 30
T = TypeVar("T")


def admin(port: int, call: Callable[[Producer], Awaitable[T]]) -> T:
    async def run() -> T:
        async with open_producer("127.0.0.1", port) as conn:
            return await call(conn)

    return trio.run(run)


def stats(port: int) -> ConsumeStats:
    return admin(port, lambda conn: get_consume_stats(conn, GROUP, TOPIC))


def stored(result: ConsumeStats) -> int:
    return sum(w.broker_offset for w in result.offset_table.values())


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def test_cpp_group_lag_falls_to_zero_and_a_reset_by_time_rereads(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    daemon = Daemon(tmp_path / "store")
    consumer = PushConsumer(GROUP)
    started = False
    try:
        produce(daemon.port, range(COUNT))
        wait_for(lambda: stored(stats(daemon.port)) == COUNT, 10, "all dispatched")
        backlog = stats(daemon.port)
        assert backlog.lag == COUNT  # a group that never committed is behind by everything

        received = Received()
        consumer.set_namesrv_addr(f"127.0.0.1:{daemon.port}")
        consumer.set_thread_count(2)
        consumer.subscribe(TOPIC, received)
        consumer.start()
        started = True
        received.wait_for(set(range(COUNT)), 40)
        lags = [backlog.lag]

        def caught_up() -> bool:
            current = stats(daemon.port)
            if current.lag != lags[-1]:
                lags.append(current.lag)
            return all(w.lag == 0 for w in current.offset_table.values())

        wait_for(caught_up, 40, "lag 0 on every queue")  # the client commits every 5 s
        assert lags[0] == COUNT and lags[-1] == 0 and lags == sorted(lags, reverse=True)
        final = stats(daemon.port)
        assert all(w.last_timestamp > 0 for w in final.offset_table.values() if w.broker_offset)

        listed = admin(daemon.port, lambda conn: get_consumer_connections(conn, GROUP))
        (client,) = listed.connections
        assert client.language == "CPP" and TOPIC in listed.subscriptions
        info: Any = admin(
            daemon.port, lambda conn: get_consumer_running_info(conn, GROUP, client.client_id)
        )
        assert isinstance(info, dict) and info  # the C++ client's own ConsumerRunningInfo

        reset = admin(daemon.port, lambda conn: reset_offset_by_time(conn, TOPIC, GROUP, 0))
        assert set(reset.offset_table.values()) == {0}

        def reread() -> bool:
            with received.lock:
                return all(len(received.by_seq.get(i, ())) >= 2 for i in range(COUNT))

        wait_for(reread, 40, "every message delivered again after the reset")
    finally:
        if started:
            consumer.shutdown()
        daemon.process.terminate()
        assert daemon.finish() == 0
