"""The RocketMQ 5 side of bench/grpc_vs_remoting.py: grpcio's client on one channel.

Sends: SendMessage of one 1 KiB message a call, the requests serialized before the clock
starts (a ring of RING requests with distinct message ids), from `concurrency` threads making
blocking calls on one channel, so that many calls are in flight on one HTTP/2 connection.
Receives: threads each looping ReceiveMessage (any queue, `batch` messages, no long polling)
then one AckMessage of every message received, until the preloaded messages are all acked.
Every answer is parsed and its status checked; a refused call counts as failed, and an
unexpected stream (a message twice, one missing) fails the run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

from bench._loadgen import RING

SERVICE: Final = "/apache.rocketmq.v2.MessagingService/"
#: invisible time of a received message: longer than any drain, so none comes back unacked
INVISIBLE_S: Final = 600
#: pause after a receive found nothing while other receivers hold the rest
_EMPTY_PAUSE_S: Final = 0.005


@dataclass(slots=True)
class Outcome:
    """What one run saw: `answered` replies inside the measured window (sends) or messages
    drained (receives), `replies` over the whole run (the divisor of CPU per message),
    latencies in seconds inside the window."""

    answered: int = 0
    replies: int = 0
    failed: int = 0
    first_failure: str = ""
    latencies_s: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def fail(self, why: str) -> None:
        self.failed += 1
        self.first_failure = self.first_failure or why[:300]


def send_requests(topic: str, body_size: int) -> list[bytes]:
    """RING SendMessageRequests of one message each: a tag, a key and a message id, as the
    remoting load generator's frames carry TAGS, KEYS and UNIQ_KEY."""
    from protocol.v2 import load

    definition, service = load()
    body = bytes((n * 7) & 0xFF for n in range(body_size))
    born = int(time.time())
    requests = []
    for n in range(RING):
        system = definition.SystemProperties(
            message_id=f"7F00000118B4AAC2{n:016X}",
            tag="TagA",
            keys=[f"order_{n}"],
            message_type=definition.MessageType.Value("NORMAL"),
            body_encoding=definition.Encoding.Value("IDENTITY"),
        )
        system.born_timestamp.seconds = born
        message = definition.Message(
            topic=definition.Resource(name=topic), body=body, system_properties=system
        )
        requests.append(bytes(service.SendMessageRequest(messages=[message]).SerializeToString()))
    return requests


def drive_sends(
    channel: Any, requests: list[bytes], concurrency: int, warmup_s: float, duration_s: float
) -> Outcome:
    """`concurrency` blocking SendMessage calls in flight for warm-up plus the window."""
    from protocol.v2 import load

    definition, service = load()
    ok = definition.Code.Value("OK")
    call = channel.unary_unary(SERVICE + "SendMessage")
    out = Outcome(seconds=duration_s)
    lock = threading.Lock()
    window_start = time.monotonic() + warmup_s
    window_end = window_start + duration_s

    def sender(first: int) -> None:
        n = first
        while (started := time.monotonic()) < window_end:
            try:
                answer = service.SendMessageResponse.FromString(
                    call(requests[n % len(requests)], timeout=30)
                )
                why = "" if answer.status.code == ok else str(answer.status)
            except Exception as exc:  # a failed call voids the row, it is not slow
                why = f"{type(exc).__name__}: {exc}"
            now = time.monotonic()
            with lock:
                out.replies += 1
                if why:
                    out.fail(why)
                elif window_start <= now <= window_end:
                    out.answered += 1
                    out.latencies_s.append(now - started)
            n += concurrency

    _run_threads(sender, concurrency)
    out.latencies_s.sort()
    return out


def drain(
    channel: Any,
    group: str,
    topic: str,
    expected: int,
    *,
    receivers: int,
    batch: int,
    timeout_s: float,
) -> Outcome:
    """Receive and ack until `expected` messages are acked; latencies are the receive calls'."""
    from google.protobuf.duration_pb2 import Duration

    from protocol.v2 import load

    definition, service = load()
    ok = definition.Code.Value("OK")
    not_found = definition.Code.Value("MESSAGE_NOT_FOUND")
    receive = channel.unary_stream(SERVICE + "ReceiveMessage")
    ack = channel.unary_unary(SERVICE + "AckMessage")
    request = service.ReceiveMessageRequest(
        group=definition.Resource(name=group),
        message_queue=definition.MessageQueue(topic=definition.Resource(name=topic), id=-1),
        filter_expression=definition.FilterExpression(
            type=definition.FilterType.Value("TAG"), expression="*"
        ),
        batch_size=batch,
        invisible_duration=Duration(seconds=INVISIBLE_S),
    ).SerializeToString()
    out = Outcome()
    seen: set[tuple[int, int]] = set()
    lock = threading.Lock()
    started = time.monotonic()
    deadline = started + timeout_s

    def receive_and_ack() -> tuple[float, list[Any]]:
        """One receive and the ack of what it brought; raises on a refusal."""
        call_started = time.monotonic()
        answers = [
            service.ReceiveMessageResponse.FromString(b) for b in receive(request, timeout=30)
        ]
        took = time.monotonic() - call_started
        code = answers[0].status.code if answers else -1
        messages = [a.message for a in answers if a.WhichOneof("content") == "message"]
        if code == not_found or (code == ok and not messages):
            return took, []
        if code != ok:
            raise RuntimeError(f"receive: {answers[0].status if answers else 'no answer'}")
        entries = [
            service.AckMessageEntry(
                message_id=m.system_properties.message_id,
                receipt_handle=m.system_properties.receipt_handle,
            )
            for m in messages
        ]
        acked = service.AckMessageResponse.FromString(
            ack(
                service.AckMessageRequest(
                    group=definition.Resource(name=group),
                    topic=definition.Resource(name=topic),
                    entries=entries,
                ).SerializeToString(),
                timeout=30,
            )
        )
        if acked.status.code != ok:
            raise RuntimeError(f"ack: {acked.status}")
        return took, messages

    def receiver(_: int) -> None:
        while len(seen) < expected and not out.failed:
            if time.monotonic() > deadline:
                with lock:
                    out.fail(f"drained {len(seen)} of {expected} in {timeout_s} s")
                return
            try:
                took, messages = receive_and_ack()
            except Exception as exc:  # the drain is void; the report says why
                with lock:
                    out.fail(f"{type(exc).__name__}: {exc}")
                return
            if not messages:
                time.sleep(_EMPTY_PAUSE_S)  # the rest is held by the other receivers
                continue
            keys = {
                (m.system_properties.queue_id, m.system_properties.queue_offset) for m in messages
            }
            with lock:
                out.latencies_s.append(took)
                out.replies += len(messages)
                if keys & seen or len(keys) != len(messages):
                    out.fail(f"received twice: {sorted(keys & seen)[:5]}")
                seen.update(keys)
                if len(seen) >= expected and not out.seconds:
                    out.seconds = time.monotonic() - started

    _run_threads(receiver, receivers)
    out.answered = len(seen)
    out.latencies_s.sort()
    return out


def _run_threads(target: Any, count: int) -> None:
    threads = [threading.Thread(target=target, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
