"""Messages sent by the official C++ client's producer (`rocketmq==0.4.4`), numbered for checks.

Message `i` carries the key `key-i` and the user property `seq` = `i`, so a consumer can tell
which one it got whatever the broker did to the body or the order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rocketmq.client import Message, Producer, SendStatus


def produce(
    port: int, topic: str, group: str, indexes: Iterable[int], body_of: Callable[[int], bytes]
) -> None:
    """Send message `i` of `indexes` with body `body_of(i)`, each acknowledged SEND_OK."""
    producer = Producer(group, timeout=5000)
    producer.set_namesrv_addr(f"127.0.0.1:{port}")
    producer.start()
    try:
        for index in indexes:
            msg = Message(topic)
            msg.set_keys(f"key-{index}")
            msg.set_property("seq", str(index))
            msg.set_body(body_of(index))
            assert producer.send_sync(msg).status == SendStatus.OK
    finally:
        producer.shutdown()
