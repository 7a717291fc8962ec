"""Run by the official RocketMQ 5 client's interpreter (.venv-rmq5), never imported by tests:

    python client_cross.py send ENDPOINT TOPIC COUNT
    python client_cross.py receive ENDPOINT GROUP TOPIC EXPECTED SECONDS

`send`: a Producer sends message i of COUNT with body "x5-i", tag "Tag<i % 3>", key "key-i" and
the user property seq=i; prints {"sent": [message ids], "errors": [...]}.
`receive`: a SimpleConsumer receives and acks until EXPECTED messages or SECONDS; prints
{"seen": [[body, tag, sorted keys, properties, message id], ...], "errors": [...]}."""

import json
import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def send(config: ClientConfiguration, topic: str, count: int) -> dict[str, object]:
    producer = Producer(config, (topic,))
    producer.startup()
    sent: list[str] = []
    errors: list[str] = []
    try:
        for i in range(count):
            msg = Message()
            msg.topic = topic
            msg.body = f"x5-{i}".encode()
            msg.tag = f"Tag{i % 3}"
            msg.keys = f"key-{i}"
            msg.add_property("seq", str(i))
            sent.append(producer.send(msg).message_id)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        producer.shutdown()
    return {"sent": sent, "errors": errors}


def receive(
    config: ClientConfiguration, group: str, topic: str, expected: int, until: float
) -> dict[str, object]:
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    seen: list[list[object]] = []
    errors: list[str] = []
    try:
        while len(seen) < expected and time.time() < until:
            for message in consumer.receive(16, 10):
                seen.append(
                    [
                        message.body.decode(),
                        message.tag,
                        sorted(message.keys),
                        dict(message.properties),
                        message.message_id,
                    ]
                )
                consumer.ack(message)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        consumer.shutdown()
    return {"seen": seen, "errors": errors}


def main() -> None:
    mode, endpoint = sys.argv[1], sys.argv[2]
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    if mode == "send":
        result = send(config, sys.argv[3], int(sys.argv[4]))
    else:
        group, topic, expected = sys.argv[3], sys.argv[4], int(sys.argv[5])
        result = receive(config, group, topic, expected, time.time() + float(sys.argv[6]))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
