"""The official RocketMQ 5 Python client's consumers against a real broker process, fed by the
project's 4.x remoting producer: a SimpleConsumer acks, sees a message it left unacked again
with delivery attempt 2 and keeps one hidden by changing its invisible duration; a
PushConsumer gets every message once; a 5.x group and a 4.x pull group on one topic each get
every message; a message a PushConsumer keeps failing ends in the group's DLQ; a FIFO group
(consumeMessageOrderly) receives a message group in the order it was sent, with its message
group; after kill -9 with messages in flight the unacked ones come back and the acked ones do
not."""

from __future__ import annotations

import pathlib
from collections import Counter, defaultdict

import trio

from protocol.admin_group import SubscriptionGroupConfig
from rmq_client.admin_groups import update_subscription_group
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import PullConsumer
from tests.daemon import Daemon
from tests.grpc.official import run_script


def _run_client(
    mode: str, endpoint: str, group: str, topic: str, expected: int
) -> dict[str, object]:
    return run_script("client_consume.py", mode, endpoint, group, topic, str(expected), "60")


async def _send(port: int, topic: str, bodies: list[bytes]) -> list[str]:
    async with open_producer("127.0.0.1", port) as producer:
        return [(await producer.send(Message(topic, body))).msg_id for body in bodies]


async def _pull_bodies(port: int, topic: str, want: int) -> list[bytes]:
    bodies: list[bytes] = []
    async with open_producer("127.0.0.1", port) as conn:
        consumer = PullConsumer(conn, "pull-4x", "127.0.0.1@pull-4x")
        await consumer.subscribe(topic)
        # an auto-created topic has 4 queues, a DLQ one
        offsets = dict.fromkeys(range(1 if topic.startswith("%DLQ%") else 4), 0)
        with trio.move_on_after(30):
            while len(bodies) < want:
                for queue_id in offsets:
                    result = await consumer.pull(topic, queue_id, offsets[queue_id])
                    if result.found:
                        bodies += [r.body or b"" for r in result.records]
                    offsets[queue_id] = max(offsets[queue_id], result.next_begin_offset)
                await trio.sleep(0.2)
    return bodies


def _attempts(result: dict[str, object]) -> dict[str, list[int]]:
    by_body: dict[str, list[int]] = defaultdict(list)
    seen = result["seen"]
    assert isinstance(seen, list)
    for body, attempt, _id, _group in seen:
        by_body[body].append(attempt)
    return dict(by_body)


def test_simple_consumer_acks_redelivers_and_changes_invisible_duration(
    tmp_path: pathlib.Path,
) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        topic = "GrpcSimple"
        ids = trio.run(_send, daemon.port, topic, [b"a", b"b", b"keep-1", b"slow-1"])
        result = _run_client("simple", f"127.0.0.1:{grpc_port}", "simple-5x", topic, 4)
        assert result["errors"] == []
        assert result["acked"] == 4
        attempts = _attempts(result)
        assert attempts == {"a": [1], "b": [1], "keep-1": [1, 2], "slow-1": [1]}
        seen = result["seen"]
        assert isinstance(seen, list)
        assert {row[2] for row in seen} == set(ids)  # the producer's message ids
    finally:
        assert daemon.stop() == 0


def test_push_consumer_gets_everything_once_beside_a_4x_group(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        topic = "GrpcPush"
        bodies = [f"m-{i}".encode() for i in range(20)]
        trio.run(_send, daemon.port, topic, bodies)
        result = _run_client("push", f"127.0.0.1:{grpc_port}", "push-5x", topic, 20)
        seen = result["seen"]
        assert isinstance(seen, list)
        assert Counter(row[0] for row in seen) == Counter(b.decode() for b in bodies)
        pulled = trio.run(_pull_bodies, daemon.port, topic, 20)
        assert sorted(pulled) == sorted(bodies)  # the 4.x group's own offsets: all of them
    finally:
        assert daemon.stop() == 0


def test_after_kill_9_unacked_messages_come_back_and_acked_ones_do_not(
    tmp_path: pathlib.Path,
) -> None:
    # one queue: each receive finds the messages, none long-polls an empty queue while the
    # first client's 10 s invisible time runs
    env = {"RMQ_GRPC_LISTEN": "127.0.0.1:0", "RMQ_DEFAULT_TOPIC_QUEUE_NUMS": "1"}
    topic = "GrpcCrash"
    daemon = Daemon(tmp_path / "store", env=env)
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        trio.run(_send, daemon.port, topic, [b"a", b"keep-1", b"b", b"keep-2"])
        first = _run_client("leave", f"127.0.0.1:{grpc_port}", "crash-5x", topic, 4)
        assert first["errors"] == []
        assert _attempts(first) == {"a": [1], "b": [1], "keep-1": [1], "keep-2": [1]}
        daemon.kill()
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
    daemon = Daemon(tmp_path / "store", env=env)
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        again = _run_client("simple", f"127.0.0.1:{grpc_port}", "crash-5x", topic, 2)
        assert again["errors"] == []
        assert _attempts(again) == {"keep-1": [2], "keep-2": [2]}
    finally:
        assert daemon.stop() == 0


async def _send_fifo(port: int, topic: str, group: str, bodies: list[bytes]) -> None:
    async with open_producer("127.0.0.1", port) as producer:
        await update_subscription_group(
            producer, SubscriptionGroupConfig(group, consume_message_orderly=True)
        )
        for body in bodies:
            props = {"__SHARDINGKEY": "order-1"}
            await producer.send(Message(topic, body, properties=props, queue_id=0))


def test_a_fifo_group_receives_a_message_group_in_order(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        topic, group = "GrpcFifo", "fifo-5x"
        bodies = [f"f-{i}".encode() for i in range(8)]
        trio.run(_send_fifo, daemon.port, topic, group, bodies)
        result = _run_client("simple", f"127.0.0.1:{grpc_port}", group, topic, 8)
        assert result["errors"] == []
        seen = result["seen"]
        assert isinstance(seen, list)
        assert [row[0] for row in seen] == [b.decode() for b in bodies]
        assert {(row[1], row[3]) for row in seen} == {(1, "order-1")}
    finally:
        assert daemon.stop() == 0


async def _dead_letters(port: int, group: str, bodies: list[bytes]) -> None:
    async with open_producer("127.0.0.1", port) as producer:
        await update_subscription_group(producer, SubscriptionGroupConfig(group, retry_max_times=1))
        for body in bodies:
            await producer.send(Message("GrpcDlq", body))


def test_a_message_a_push_consumer_keeps_failing_ends_in_the_dead_letter_queue(
    tmp_path: pathlib.Path,
) -> None:
    # delay levels of 1 s: the client's backoff between attempts (told in its settings)
    env = {"RMQ_GRPC_LISTEN": "127.0.0.1:0", "RMQ_MESSAGE_DELAY_LEVEL": "1s 1s 1s 1s"}
    daemon = Daemon(tmp_path / "store", env=env)
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        group = "dlq-5x"
        trio.run(_dead_letters, daemon.port, group, [b"ok-1", b"fail-1", b"ok-2"])
        # ok-1, ok-2 once; fail-1 at attempt 1 and 2 (retryMaxTimes 1), then the DLQ
        result = _run_client("deliveries", f"127.0.0.1:{grpc_port}", group, "GrpcDlq", 4)
        assert _attempts(result) == {"ok-1": [1], "ok-2": [1], "fail-1": [1, 2]}
        dead = trio.run(_pull_bodies, daemon.port, f"%DLQ%{group}", 1)
        assert dead == [b"fail-1"]
    finally:
        assert daemon.stop() == 0
