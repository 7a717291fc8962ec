"""The official C++ 4.x client (`rocketmq==0.4.4`, remoting) and the official RocketMQ 5 Python
client (gRPC, a subprocess) on one real broker process: what the C++ producer sends, a 5.x
SimpleConsumer receives with its tag, keys and user property; what the 5.x Producer sends, a C++
push consumer receives with its tag, keys and user property; a 5.x group and a C++ push group on
one topic each get every message."""

from __future__ import annotations

import pathlib
import threading
import time

import pytest
from rocketmq.client import Message, Producer, PushConsumer, RecvMessage, SendStatus

from tests.daemon import Daemon
from tests.grpc.official import run_script

COUNT = 12


def _run_client(*args: str) -> dict[str, object]:
    result = run_script("client_cross.py", *args, timeout_s=120)
    assert result["errors"] == []
    return result


def _cpp_send(port: int, topic: str, count: int) -> None:
    producer = Producer("cross_cpp_producer", timeout=5000)
    producer.set_namesrv_addr(f"127.0.0.1:{port}")
    producer.start()
    try:
        for i in range(count):
            msg = Message(topic)
            msg.set_tags(f"Tag{i % 3}")
            msg.set_keys(f"key-{i}")
            msg.set_property("seq", str(i))
            msg.set_body(f"x4-{i}".encode())
            assert producer.send_sync(msg).status == SendStatus.OK
    finally:
        producer.shutdown()


class _CppReceived:
    """What a C++ push consumer was given: (body, tags, keys, property seq) per delivery."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[str, str, str, str]] = []

    def __call__(self, msg: RecvMessage) -> None:
        with self.lock:
            self.rows.append(
                (
                    msg.body.decode(),
                    msg.tags.decode(),
                    msg.keys.decode(),
                    msg.get_property("seq").decode(),
                )
            )

    def wait_for(self, count: int, timeout_s: float) -> list[tuple[str, str, str, str]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.rows) >= count:
                    break
            time.sleep(0.1)
        time.sleep(1)  # a delivery beyond `count` would show now
        with self.lock:
            return list(self.rows)


def _cpp_push_consumer(port: int, group: str, topic: str, received: _CppReceived) -> PushConsumer:
    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(f"127.0.0.1:{port}")
    consumer.set_thread_count(2)
    consumer.subscribe(topic, received)
    consumer.start()
    return consumer


def _expected(prefix: str, count: int) -> list[tuple[str, str, str, str]]:
    return sorted((f"{prefix}-{i}", f"Tag{i % 3}", f"key-{i}", str(i)) for i in range(count))


def _five_rows(result: dict[str, object]) -> list[tuple[str, str, str, str]]:
    seen = result["seen"]
    assert isinstance(seen, list)
    rows = []
    for body, tag, keys, properties, _id in seen:
        assert len(keys) == 1
        rows.append((body, tag, keys[0], properties.get("seq")))
    return sorted(rows)


@pytest.fixture
def cpp_home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """HOME for the C++ client's logs (`~/logs/rocketmq-cpp`)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def test_cpp_producer_to_5x_simple_consumer(tmp_path: pathlib.Path, cpp_home: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        _cpp_send(daemon.port, "CrossFrom4", COUNT)
        result = _run_client(
            "receive", f"127.0.0.1:{grpc_port}", "cross-5x", "CrossFrom4", str(COUNT), "40"
        )
        assert _five_rows(result) == _expected("x4", COUNT)
    finally:
        assert daemon.stop() == 0


def test_5x_producer_to_cpp_push_consumer(tmp_path: pathlib.Path, cpp_home: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        sent = _run_client("send", f"127.0.0.1:{grpc_port}", "CrossFrom5", str(COUNT))["sent"]
        assert isinstance(sent, list) and len(set(sent)) == COUNT
        received = _CppReceived()
        consumer = _cpp_push_consumer(daemon.port, "cross_cpp_push", "CrossFrom5", received)
        try:
            rows = received.wait_for(COUNT, 40)
        finally:
            consumer.shutdown()
        assert sorted(rows) == _expected("x5", COUNT)
    finally:
        assert daemon.stop() == 0


def test_5x_group_and_cpp_push_group_each_get_every_message(
    tmp_path: pathlib.Path, cpp_home: pathlib.Path
) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        endpoint = f"127.0.0.1:{grpc_port}"
        _cpp_send(daemon.port, "CrossBoth", COUNT)
        _run_client("send", endpoint, "CrossBoth", str(COUNT))
        both = sorted(_expected("x4", COUNT) + _expected("x5", COUNT))
        received = _CppReceived()
        consumer = _cpp_push_consumer(daemon.port, "cross_both_cpp", "CrossBoth", received)
        try:
            five = _run_client(
                "receive", endpoint, "cross-both-5x", "CrossBoth", str(2 * COUNT), "40"
            )
            rows = received.wait_for(2 * COUNT, 40)
        finally:
            consumer.shutdown()
        assert _five_rows(five) == both
        assert sorted(rows) == both
    finally:
        assert daemon.stop() == 0
