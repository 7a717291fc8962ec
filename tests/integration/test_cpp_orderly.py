"""Orderly push consumers of the official C++ client (`rocketmq==0.4.4`, `orderly=True`) against
a real `rmq-broker serve`: they own queues through LOCK_BATCH_MQ before they consume them.

One orderly consumer receives every message, each queue in queue order. Two of one group split
the queues between them, and no queue is consumed by both at once (their callbacks on one queue
never overlap in time). A consumer process that is SIGKILLed keeps its locks until they expire
(`rebalance_lock_max_live_time`, short here); then the other consumer takes its queues over and
receives the rest, and a consumer restarted later resumes from the committed offsets.
"""

from __future__ import annotations

import datetime
import itertools
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterable

from rocketmq.client import PushConsumer, RecvMessage

from tests.daemon import Daemon
from tests.integration import cpp_producer

TOPIC = "CppOrderly"
GROUP = "cpp_orderly_group"
COUNT = 60
#: long enough for the client to renew its locks (every 20 s), short enough for a test
LOCK_LIVE_MS = "4000"


def produce(port: int, indexes: Iterable[int]) -> None:
    cpp_producer.produce(
        port, TOPIC, "cpp_orderly_producer", indexes, lambda index: f"body-{index}".encode()
    )


class Log:
    """Every delivery: (seq, queue id, queue offset, consumer, callback start, callback end)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[int, int, int, str, float, float]] = []

    def consumer(self, name: str) -> object:
        def on_message(msg: RecvMessage) -> None:
            start = time.time()  # the broker's clock: its lock events are compared with these
            time.sleep(0.01)  # long enough for two callbacks on one queue to overlap
            with self.lock:
                seq = int(msg.get_property("seq"))
                self.rows.append((seq, msg.queue_id, msg.queue_offset, name, start, time.time()))

        return on_message

    def seqs(self) -> set[int]:
        with self.lock:
            return {row[0] for row in self.rows}

    def wait_for(self, wanted: set[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not wanted <= self.seqs():
            time.sleep(0.1)
        missing = sorted(wanted - self.seqs())
        assert not missing, f"never delivered: {missing[:20]} ({len(missing)} in all)"


def start_consumer(port: int, log: Log, name: str) -> PushConsumer:
    consumer = PushConsumer(GROUP, orderly=True)
    consumer.set_namesrv_addr(f"127.0.0.1:{port}")
    consumer.set_instance_name(name)
    consumer.set_thread_count(2)
    consumer.subscribe(TOPIC, log.consumer(name))
    consumer.start()
    return consumer


def check_queue_order(rows: list[tuple[int, int, int, str, float, float]]) -> None:
    """Within a queue, first deliveries come in queue-offset order."""
    seen: set[tuple[int, int]] = set()
    last: dict[int, int] = {}
    for _seq, queue, offset, _name, _start, _end in sorted(rows, key=lambda r: r[4]):
        if (queue, offset) in seen:
            continue  # a redelivery after a takeover, from the committed offset
        seen.add((queue, offset))
        assert offset > last.get(queue, -1), f"queue {queue}: offset {offset} after {last[queue]}"
        last[queue] = offset


def unlocks(events: list[dict[str, object]]) -> dict[tuple[int, str], list[float]]:
    """(queue id, consumer name) -> when the broker released that consumer's lock on it."""
    out: dict[tuple[int, str], list[float]] = {}
    for event in events:
        if event.get("event") == "queue_unlocked" and str(event["queue"]).startswith(TOPIC + ":"):
            queue = int(str(event["queue"]).rsplit(":", 1)[1])
            name = str(event["client_id"]).rsplit("@", 1)[-1]
            when = datetime.datetime.fromisoformat(str(event["timestamp"])).timestamp()
            out.setdefault((queue, name), []).append(when)
    return out


def check_exclusive(
    rows: list[tuple[int, int, int, str, float, float]],
    released: dict[tuple[int, str], list[float]],
) -> None:
    """No two consumers' callbacks on one queue overlap in time, but for the one a consumer had
    begun when it gave the queue up: the C++ client unlocks a queue it loses in a rebalance
    without waiting for its callback in flight (the Java client waits). The broker's part, one
    holder at a time, is what this checks: the new owner's callback began after the broker
    released the old owner's lock, which began the overlapping callback before that."""
    by_queue: dict[int, list[tuple[float, float, str]]] = {}
    for _seq, queue, _offset, name, start, end in rows:
        by_queue.setdefault(queue, []).append((start, end, name))
    for queue, spans in by_queue.items():
        spans.sort()
        for (start1, end1, name1), (start2, _e2, name2) in itertools.pairwise(spans):
            handed_over = any(start1 <= u <= start2 for u in released.get((queue, name1), []))
            assert name1 == name2 or start2 >= end1 or handed_over, (
                f"queue {queue}: {name1} and {name2} at once"
            )


def test_orderly_consumers_own_their_queues(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    daemon = Daemon(tmp_path / "store", "--flush-disk-type", "SYNC_FLUSH")
    try:
        produce(daemon.port, range(COUNT))
        log = Log()
        first = start_consumer(daemon.port, log, "first")
        second = start_consumer(daemon.port, log, "second")
        try:
            log.wait_for(set(range(COUNT)), 60)
            produce(daemon.port, range(COUNT, 2 * COUNT))  # while both run
            log.wait_for(set(range(2 * COUNT)), 60)
        finally:
            first.shutdown()
            second.shutdown()
    finally:
        daemon.process.terminate()
        assert daemon.finish() == 0
    rows = log.rows
    check_queue_order(rows)
    daemon.drain()
    check_exclusive(rows, unlocks(daemon.events))
    names_by_queue = {
        queue: {r[3] for r in rows if r[1] == queue} for queue in {r[1] for r in rows}
    }
    assert len(names_by_queue) == 4, names_by_queue
    print(f"orderly deliveries={len(rows)} consumers by queue={names_by_queue}")


# The client calls back on several threads at once: each delivery is one write under a lock,
# as print() writes its parts one by one and two callbacks would interleave them.
VICTIM = """
import sys, threading, time
from rocketmq.client import PushConsumer
consumer = PushConsumer(sys.argv[2], orderly=True)
consumer.set_namesrv_addr("127.0.0.1:" + sys.argv[1])
consumer.set_instance_name("victim")
out = threading.Lock()
def on_message(msg):
    line = "%s %d\\n" % (msg.get_property("seq").decode(), msg.queue_id)
    with out:
        sys.stdout.write(line)
        sys.stdout.flush()
consumer.subscribe(sys.argv[3], on_message)
consumer.start()
print("started", flush=True)
time.sleep(600)
"""


def test_a_killed_orderly_consumer_releases_its_queues_when_its_locks_expire(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    store = tmp_path / "store"
    env = {"RMQ_REBALANCE_LOCK_MAX_LIVE_TIME": LOCK_LIVE_MS}
    daemon = Daemon(store, "--flush-disk-type", "SYNC_FLUSH", env=env)
    victim_seqs: list[int] = []
    victim_garbage: list[str] = []  # lines that are no delivery: the failure says what they were
    victim = subprocess.Popen(
        [sys.executable, "-c", VICTIM, str(daemon.port), GROUP, TOPIC],
        stdout=subprocess.PIPE,
        text=True,
    )

    started = threading.Event()

    def read_victim() -> None:
        assert victim.stdout is not None
        for line in victim.stdout:
            fields = line.split()
            if line.startswith("started"):
                started.set()
            elif len(fields) == 2 and all(field.isdigit() for field in fields):
                victim_seqs.append(int(fields[0]))
            else:
                victim_garbage.append(line)

    threading.Thread(target=read_victim, daemon=True).start()
    log = Log()
    try:
        assert started.wait(30), "the victim consumer did not start"
        produce(daemon.port, range(COUNT))
        survivor = start_consumer(daemon.port, log, "survivor")
        try:
            # rebalances come every 20 s: a loaded machine may need a few of them
            deadline = time.monotonic() + 120
            while missing := set(range(COUNT)) - log.seqs() - set(victim_seqs):
                assert time.monotonic() < deadline, (
                    f"the first messages were not all delivered: {sorted(missing)[:20]} missing,"
                    f" the victim wrote {victim_garbage[:5]} besides its deliveries"
                )
                time.sleep(0.1)
            assert not victim_garbage, victim_garbage[:5]
            assert victim_seqs, "the victim owned no queue"
            victim.kill()  # SIGKILL: no unlock, its locks stay until they expire
            victim.wait(30)
            produce(daemon.port, range(COUNT, 2 * COUNT))
            log.wait_for(set(range(COUNT, 2 * COUNT)), 120)
        finally:
            survivor.shutdown()  # persists its offsets
        produce(daemon.port, range(2 * COUNT, 2 * COUNT + 20))
        restarted_log = Log()
        restarted = start_consumer(daemon.port, restarted_log, "restarted")
        try:
            restarted_log.wait_for(set(range(2 * COUNT, 2 * COUNT + 20)), 90)
        finally:
            restarted.shutdown()
    finally:
        if victim.poll() is None:
            victim.kill()
        daemon.process.terminate()
        assert daemon.finish() == 0
    check_queue_order(log.rows)
    # Resumed from the committed offsets: nothing the survivor had consumed comes again.
    assert restarted_log.seqs() == set(range(2 * COUNT, 2 * COUNT + 20))
    taken_over = {r[1] for r in log.rows if r[0] >= COUNT}
    print(f"victim got {len(victim_seqs)}; the survivor consumed queues {sorted(taken_over)} after")
    assert len(taken_over) == 4
