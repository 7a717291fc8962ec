"""Run by the official RocketMQ 5 client's interpreter (.venv-rmq5), never imported by tests:

    python client_consume.py simple ENDPOINT GROUP TOPIC EXPECTED SECONDS
    python client_consume.py push ENDPOINT GROUP TOPIC EXPECTED SECONDS
    python client_consume.py MODE ENDPOINT GROUP TOPIC EXPECTED SECONDS SQL92-EXPRESSION

`simple`: a SimpleConsumer receives one message at a time (invisible 2 s) until EXPECTED acked
messages or SECONDS; a body starting with "keep" is left unacked the first time it comes, one
starting with "slow" has its invisible duration changed to 4 s first (then acked under its new
handle).
`leave`: as `simple` with invisible 10 s, but it ends once EXPECTED messages were received,
the "keep" ones unacked.
`push`: a PushConsumer consumes every message with SUCCESS, one starting with "fail" with
FAILURE each time, until EXPECTED messages were consumed successfully or SECONDS;
`deliveries`: as `push`, until EXPECTED deliveries (failed ones included).
With a SQL92 expression the consumer subscribes with it (FilterType SQL), else to every tag.
Prints one JSON line: each delivery as [body, delivery attempt, message id, message group],
and any error."""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import FilterType


def delivery(message) -> list[object]:  # type: ignore[no-untyped-def]
    return [
        message.body.decode(),
        message.delivery_attempt,
        message.message_id,
        message.message_group,
    ]


def simple(
    config: ClientConfiguration,
    group: str,
    topic: str,
    expected: int,
    until: float,
    *,
    leave: bool = False,
    subscription: FilterExpression,
) -> dict[str, object]:
    consumer = SimpleConsumer(config, group, {topic: subscription}, await_duration=2)
    consumer.startup()
    seen: list[list[object]] = []
    acked = 0
    errors: list[str] = []
    try:
        while (len(seen) if leave else acked) < expected and time.time() < until:
            # one at a time under 2 s: the "slow" one's 3 s would outlast the others' handles
            for message in consumer.receive(16 if leave else 1, 10 if leave else 2):
                seen.append(delivery(message))
                body = message.body.decode()
                if body.startswith("keep") and message.delivery_attempt == 1:
                    continue
                if body.startswith("slow") and message.delivery_attempt == 1:
                    consumer.change_invisible_duration(message, 4)
                    time.sleep(3)  # past the first 2 s: the change keeps it hidden
                consumer.ack(message)
                acked += 1
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        consumer.shutdown()
    return {"seen": seen, "acked": acked, "errors": errors}


class Listener(MessageListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.seen: list[list[object]] = []
        self.ok = 0
        self.lock = threading.Lock()

    def consume(self, message) -> ConsumeResult:  # type: ignore[no-untyped-def]
        with self.lock:
            self.seen.append(delivery(message))
            if message.body.decode().startswith("fail"):
                return ConsumeResult.FAILURE
            self.ok += 1
        return ConsumeResult.SUCCESS


def push(
    config: ClientConfiguration,
    group: str,
    topic: str,
    expected: int,
    until: float,
    *,
    deliveries: bool = False,
    subscription: FilterExpression,
) -> dict[str, object]:
    listener = Listener()
    consumer = PushConsumer(config, group, listener, {topic: subscription})
    consumer.startup()
    try:
        while (len(listener.seen) if deliveries else listener.ok) < expected and (
            time.time() < until
        ):
            time.sleep(0.2)
        time.sleep(2)  # anything delivered twice would show now
    finally:
        consumer.shutdown()
    with listener.lock:
        return {"seen": listener.seen, "acked": listener.ok, "errors": []}


def main() -> None:
    mode, endpoint, group, topic = sys.argv[1:5]
    expected, seconds = int(sys.argv[5]), float(sys.argv[6])
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    until = time.time() + seconds
    sql = sys.argv[7] if len(sys.argv) > 7 else None
    subscription = FilterExpression(sql, FilterType.SQL) if sql else FilterExpression()
    if mode in ("push", "deliveries"):
        deliveries = mode == "deliveries"
        result = push(
            config, group, topic, expected, until, deliveries=deliveries, subscription=subscription
        )
    else:
        leave = mode == "leave"
        result = simple(
            config, group, topic, expected, until, leave=leave, subscription=subscription
        )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
