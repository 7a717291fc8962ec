"""Messages sent by the official C++ client's producer (`rocketmq==0.4.4`), numbered for checks.

Message `i` carries the key `key-i` and the user property `seq` = `i`, so a consumer can tell
which one it got whatever the broker did to the body or the order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from rocketmq.client import Message, Producer, SendStatus

#: the C++ client refreshes its routes on a timer that fires 3 s after its start and every 30 s
#: after; a shutdown while a refresh runs may abort the whole process (seen once in the suite:
#: a producer shut down 3.0 s after its start)
ROUTE_TIMER_FIRST_S: Final = 3.0
ROUTE_TIMER_EVERY_S: Final = 30.0
#: how far from a refresh a shutdown keeps, each side
ROUTE_TIMER_MARGIN_S: Final = 0.5


class _Client(Protocol):
    def shutdown(self) -> None: ...


def shutdown_clear_of_route_refresh(client: _Client, started: float) -> None:
    """Shut the client started at `started` (time.monotonic) down, after its route refresh
    if one is about to run or running."""
    since = time.monotonic() - started - ROUTE_TIMER_FIRST_S + ROUTE_TIMER_MARGIN_S
    if since >= 0:
        phase = since % ROUTE_TIMER_EVERY_S
        if phase < 2 * ROUTE_TIMER_MARGIN_S:
            time.sleep(2 * ROUTE_TIMER_MARGIN_S - phase)
    client.shutdown()


def produce(
    port: int, topic: str, group: str, indexes: Iterable[int], body_of: Callable[[int], bytes]
) -> None:
    """Send message `i` of `indexes` with body `body_of(i)`, each acknowledged SEND_OK."""
    producer = Producer(group, timeout=5000)
    producer.set_namesrv_addr(f"127.0.0.1:{port}")
    producer.start()
    started = time.monotonic()
    try:
        for index in indexes:
            msg = Message(topic)
            msg.set_keys(f"key-{index}")
            msg.set_property("seq", str(index))
            msg.set_body(body_of(index))
            assert producer.send_sync(msg).status == SendStatus.OK
    finally:
        shutdown_clear_of_route_refresh(producer, started)
