"""The official RocketMQ C++ client (`rocketmq==0.4.4`) consumes from a real `rmq-broker serve`.

The C++ producer sends messages with tags, keys, a user property and bodies of 8 KiB (which it
compresses) or a few bytes. A C++ push consumer (rebalance, long-polling pulls, offsets committed
to the broker) must receive every one of them as sent; after the broker restarts on the same
store, the same group resumes from its committed offsets: every new message arrives, and the old
ones are not delivered again beyond the last commit window. A C++ pull consumer (the binding's
`PullConsumer.pull`, which walks every queue of the topic) then reads all of them.
"""

from __future__ import annotations

import pathlib
import threading
import time

import trio
from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, RecvMessage, SendStatus

from rmq_client.pull_consumer import open_pull_consumer
from tests.daemon import Daemon
from tests.integration.cpp_producer import shutdown_clear_of_route_refresh

TOPIC = "CppConsume"
GROUP = "cpp_consume_group"
FIRST = 60
SECOND = 40
COMPRESSED_EVERY = 7  # every 7th body is 8 KiB: compressed by the client


def body_of(index: int) -> bytes:
    if index % COMPRESSED_EVERY == 0:
        return (f"large-{index}-".encode() * 1024)[: 8 * 1024]
    return f"body-{index}".encode()


def produce(port: int, indexes: range) -> None:
    producer = Producer("cpp_consume_producer", timeout=5000)
    producer.set_namesrv_addr(f"127.0.0.1:{port}")
    producer.start()
    producer_started = time.monotonic()
    try:
        for index in indexes:
            msg = Message(TOPIC)
            msg.set_tags(f"Tag{index % 3}")
            msg.set_keys(f"key-{index}")
            msg.set_property("seq", str(index))
            msg.set_body(body_of(index))
            assert producer.send_sync(msg).status == SendStatus.OK
    finally:
        shutdown_clear_of_route_refresh(producer, producer_started)


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_seq: dict[int, list[tuple[bytes, bytes, bytes]]] = {}

    def __call__(self, msg: RecvMessage) -> None:
        with self.lock:
            seq = int(msg.get_property("seq"))
            self.by_seq.setdefault(seq, []).append((msg.body, msg.tags, msg.keys))

    def wait_for(self, wanted: set[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if wanted <= set(self.by_seq):
                    return
            time.sleep(0.1)
        with self.lock:
            missing = sorted(wanted - set(self.by_seq))
        raise AssertionError(f"never delivered: {missing[:20]} ({len(missing)} in all)")


def consume(port: int, received: Received, wanted: set[int]) -> None:
    consumer = PushConsumer(GROUP)
    consumer.set_namesrv_addr(f"127.0.0.1:{port}")
    consumer.set_thread_count(2)
    consumer.subscribe(TOPIC, received)
    consumer.start()
    consumer_started = time.monotonic()
    try:
        received.wait_for(wanted, 40)
        # The client commits its offsets every 5 s: wait until the broker holds them all.
        wait_committed(port, 40)
    finally:
        shutdown_clear_of_route_refresh(consumer, consumer_started)


async def uncommitted(port: int) -> int:
    """How many messages of the topic the group has not committed on the broker."""
    async with open_pull_consumer("127.0.0.1", port, GROUP, client_id="offset-check@0") as check:
        route = await check.connection.get_route(TOPIC)
        behind = 0
        for data in route.queue_datas:
            for queue_id in range(data.read_queue_nums):
                committed = await check.committed(TOPIC, queue_id) or 0
                behind += await check.max_offset(TOPIC, queue_id) - committed
    return behind


def wait_committed(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (behind := trio.run(uncommitted, port)) > 0:
        assert time.monotonic() < deadline, f"{behind} messages never committed"
        time.sleep(0.2)


def check(received: Received, indexes: range) -> None:
    for index in indexes:
        body, tags, keys = received.by_seq[index][0]
        assert body == body_of(index)
        assert tags == f"Tag{index % 3}".encode() and keys == f"key-{index}".encode()


def test_cpp_push_and_pull_consumers_read_every_message_and_resume_after_restart(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    store = tmp_path / "store"
    daemon = Daemon(store, "--flush-disk-type", "SYNC_FLUSH")
    try:
        produce(daemon.port, range(FIRST))
        first = Received()
        consume(daemon.port, first, set(range(FIRST)))
    finally:
        daemon.process.terminate()
        assert daemon.finish() == 0
    check(first, range(FIRST))
    assert (store / "config" / "consumerOffset.json").exists()

    daemon = Daemon(store, "--flush-disk-type", "SYNC_FLUSH")
    try:
        produce(daemon.port, range(FIRST, FIRST + SECOND))
        second = Received()
        consume(daemon.port, second, set(range(FIRST, FIRST + SECOND)))
        puller = PullConsumer("cpp_consume_puller")
        puller.set_namesrv_addr(f"127.0.0.1:{daemon.port}")
        puller.start()
        puller_started = time.monotonic()
        try:
            pulled = {int(m.get_property("seq")): m.body for m in puller.pull(TOPIC)}
        finally:
            shutdown_clear_of_route_refresh(puller, puller_started)
    finally:
        daemon.process.terminate()
        assert daemon.finish() == 0
    check(second, range(FIRST, FIRST + SECOND))
    # resumed from the committed offsets: the first run's messages are not delivered again
    assert not set(second.by_seq) & set(range(FIRST))
    assert pulled == {i: body_of(i) for i in range(FIRST + SECOND)}
