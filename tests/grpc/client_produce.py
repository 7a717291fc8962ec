"""Run by the official RocketMQ 5 client's interpreter (.venv-rmq5), never imported by tests:
`python client_produce.py ENDPOINT TOPIC TX_TOPIC` sends, with one producer each:
a normal message (tag, keys, a user property), three FIFO messages of one message group, a
message to deliver 3 s later, and on TX_TOPIC a committed, a rolled-back and an unfinished
transaction (its checker commits it when the broker asks). Prints one JSON line: what each send
answered ({"ok": message id} or {"error": text}) and the message ids the checker was asked."""

import contextlib
import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)

checked: list[str] = []
asked = threading.Event()


class Checker(TransactionChecker):  # type: ignore[misc]
    def check(self, message: Message) -> TransactionResolution:
        checked.append(message.message_id)
        asked.set()
        return TransactionResolution.COMMIT


def message(topic: str, body: bytes, **fields: object) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def attempt(result: dict[str, object], name: str, call) -> object:  # type: ignore[no-untyped-def]
    try:
        receipt = call()
        result[name] = {"ok": getattr(receipt, "message_id", None)}
        return receipt
    except Exception as exc:
        result[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return None


def signed_send(endpoint: str, topic: str, ak: str, sk: str) -> None:
    """`python client_produce.py ENDPOINT TOPIC --signed AK SK`: one send with those
    credentials; prints {"send": {"ok": id} | {"error": text}}."""
    config = ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=5)
    producer = Producer(config, (topic,))
    result: dict[str, object] = {}
    try:
        producer.startup()
        attempt(result, "send", lambda: producer.send(message(topic, b"signed")))
    except Exception as exc:
        result["send"] = {"error": f"startup: {type(exc).__name__}: {exc}"}
    finally:
        with contextlib.suppress(Exception):
            producer.shutdown()
    print(json.dumps(result), flush=True)


def main() -> None:
    if sys.argv[3] == "--signed":
        signed_send(sys.argv[1], sys.argv[2], sys.argv[4], sys.argv[5])
        return
    endpoint, topic, tx_topic = sys.argv[1], sys.argv[2], sys.argv[3]
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    result: dict[str, object] = {}
    producer = Producer(config, (topic,))
    producer.startup()
    normal = message(topic, b"normal", tag="TagA", keys="k1")
    normal.add_property("color", "blue")
    attempt(result, "normal", lambda: producer.send(normal))
    for i in range(3):
        fifo = message(topic, f"fifo-{i}".encode(), message_group="group-1")
        attempt(result, f"fifo{i}", lambda fifo=fifo: producer.send(fifo))
    result["delivery_s"] = int(time.time()) + 3
    delayed = message(topic, b"delayed", delivery_timestamp=result["delivery_s"])
    attempt(result, "delay", lambda: producer.send(delayed))
    producer.shutdown()

    tx = Producer(config, (tx_topic,), Checker())
    tx.startup()
    for name, end in (("commit", "commit"), ("rollback", "rollback"), ("unknown", None)):
        transaction = tx.begin_transaction()
        half = message(tx_topic, name.encode())
        receipt = attempt(result, name, lambda h=half, t=transaction: tx.send(h, t))
        if receipt is not None and end is not None:
            try:
                getattr(transaction, end)()
            except Exception as exc:
                result[name] = {"error": f"end: {type(exc).__name__}: {exc}"}
    result["asked"] = asked.wait(60)
    time.sleep(1)  # the checker's EndTransaction
    result["checked"] = checked
    tx.shutdown()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
