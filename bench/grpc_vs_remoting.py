"""RocketMQ 5 over gRPC against the 4.x remoting path: send and receive throughput, one run.

Two real brokers (`rmq-broker serve`, ASYNC_FLUSH, each on its own fresh store): one with its
gRPC port open, measured only through it, and one without, measured over remoting. For 1 KiB
messages the paths take turns row by row, `--repeat` times (the median by msgs/s stands):

* **send**, one call at a time and `--concurrency` in flight on one connection:
  gRPC SendMessage from grpcio (blocking calls from that many threads on one channel) against
  SEND_MESSAGE_V2 from bench/_loadgen.py's generator (one socket, that many pipelined
  requests). Both encode their requests before the clock starts and run in this process.
* **receive**: `--messages` preloaded into each broker (the same remoting producer), then
  drained by a fresh group per run: gRPC ReceiveMessage of `--batch` from any queue + one
  AckMessage of the batch, from `--receivers` threads on one channel, against PULL_MESSAGE of
  `--batch` + UPDATE_CONSUMER_OFFSET (rmq_client's pull consumer, `--receivers` tasks on one
  connection over the topic's 4 queues). One read call and one commit call per batch each way.

Each row prints msgs/s, p50/p99 (ack latency of a send; one batch read of a receive), the
broker's CPU time per message and this process's (the client's), from /proc, then a `ratio`
line grpc / remoting; the brokers' resident memory idle and after the runs ends the report.

    .venv/bin/python bench/grpc_vs_remoting.py [--duration 3] [--concurrency 8] [--messages 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import cpu_seconds, load_average, percentile, print_machine, report, rss_mib
from bench._grpc_client import Outcome, drain, drive_sends, send_requests
from bench._loadgen import QUEUES, TOPIC, Load, Share, Target
from rmq_client import BrokerOptions, BrokerProcess
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer

BODY_SIZE: Final = 1024
RECEIVE_TOPIC: Final = "BenchReceive"
#: the broker's own defaults where the test defaults of BrokerProcess shrink them
BROKER_CONFIG: Final[dict[str, object]] = {
    "mapped_file_size_commit_log": 1 << 30,
    "max_hash_slot_num": 5_000_000,
    "max_index_num": 20_000_000,
}
CLIENTS: Final = {
    ("send", "grpc"): "grpcio",
    ("send", "remoting"): "loadgen",
    ("receive", "grpc"): "grpcio",
    ("receive", "remoting"): "rmq_client",
}


@dataclass(frozen=True, slots=True)
class Settings:
    duration_s: float
    warmup_s: float
    concurrency: int
    messages: int
    batch: int
    receivers: int
    repeat: int
    drain_timeout_s: float


@dataclass(frozen=True, slots=True)
class Figures:
    msgs_per_s: float
    p50_ms: float
    p99_ms: float
    broker_cpu_us_msg: float
    client_cpu_us_msg: float
    messages: int
    failed: int
    first_failure: str


def measured(broker: BrokerProcess, run: Callable[[], Outcome]) -> Figures:
    """Run one row; the broker's and this process's CPU time over it, per reply."""
    assert broker.pid is not None
    broker_before, client_before = cpu_seconds(broker.pid), time.process_time()
    out = run()
    broker_cpu = cpu_seconds(broker.pid) - broker_before
    client_cpu = time.process_time() - client_before
    per = 1e6 / out.replies if out.replies else 0.0
    return Figures(
        msgs_per_s=out.answered / out.seconds if out.seconds else 0.0,
        p50_ms=statistics.median(out.latencies_s) * 1000 if out.latencies_s else 0.0,
        p99_ms=percentile(out.latencies_s, 0.99) * 1000,
        broker_cpu_us_msg=broker_cpu * per,
        client_cpu_us_msg=client_cpu * per,
        messages=out.answered,
        failed=out.failed,
        first_failure=out.first_failure,
    )


class GrpcPath:
    name: Final = "grpc"

    def __init__(self, broker: BrokerProcess, channel: Any) -> None:
        self.broker = broker
        self.channel = channel
        self.requests = send_requests(TOPIC, BODY_SIZE)
        drive_sends(channel, self.requests[:50], 1, 0.0, 0.3)  # topic, connection, imports

    def send(self, settings: Settings, concurrency: int) -> Figures:
        return measured(
            self.broker,
            lambda: drive_sends(
                self.channel, self.requests, concurrency, settings.warmup_s, settings.duration_s
            ),
        )

    def receive(self, settings: Settings, group: str) -> Figures:
        return measured(
            self.broker,
            lambda: drain(
                self.channel,
                group,
                RECEIVE_TOPIC,
                settings.messages,
                receivers=settings.receivers,
                batch=settings.batch,
                timeout_s=settings.drain_timeout_s,
            ),
        )


class RemotingPath:
    name: Final = "remoting"

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.target = Target("remoting", "127.0.0.1", broker.port)
        Share(self.target, Load(1, 1, BODY_SIZE, 0.3, 0.0), [0]).run(time.monotonic())

    def send(self, settings: Settings, concurrency: int) -> Figures:
        load = Load(1, concurrency, BODY_SIZE, settings.duration_s, settings.warmup_s)
        share = Share(self.target, load, [0])  # connected, its frames encoded

        def run() -> Outcome:
            result = share.run(time.monotonic())
            latencies = array("d")
            latencies.frombytes(result.latencies_us)
            out = Outcome(result.acked, result.replies, result.failed, result.first_failure)
            out.latencies_s = sorted(us / 1e6 for us in latencies)
            out.seconds = settings.duration_s
            if result.unanswered:
                out.fail(f"{result.unanswered} requests unanswered")
            return out

        return measured(self.broker, run)

    def receive(self, settings: Settings, group: str) -> Figures:
        return measured(
            self.broker,
            lambda: trio.run(pull_drain, self.broker.port, group, settings),
        )


async def pull_drain(port: int, group: str, settings: Settings) -> Outcome:
    """Pull every queue of RECEIVE_TOPIC from offset 0 to its end, committing after each pull."""
    out = Outcome()
    seen: set[tuple[int, int]] = set()
    async with open_pull_consumer("127.0.0.1", port, group, client_id=f"{group}@0") as consumer:
        await consumer.subscribe(RECEIVE_TOPIC)
        ends = [await consumer.max_offset(RECEIVE_TOPIC, q) for q in range(QUEUES)]
        todo = list(range(QUEUES))
        started = time.monotonic()

        async def receiver() -> None:
            while todo:
                queue_id = todo.pop()
                offset = 0
                while offset < ends[queue_id]:
                    call_started = time.monotonic()
                    result = await consumer.pull(
                        RECEIVE_TOPIC, queue_id, offset, max_nums=settings.batch
                    )
                    out.latencies_s.append(time.monotonic() - call_started)
                    keys = {(queue_id, record.queue_offset) for record in result.records}
                    if keys & seen or len(keys) != len(result.records) or not keys:
                        out.fail(f"pull of queue {queue_id} at {offset}: {result.code}")
                        return
                    seen.update(keys)
                    out.replies += len(keys)
                    offset = result.next_begin_offset
                    await consumer.commit(RECEIVE_TOPIC, queue_id, offset)

        with trio.fail_after(settings.drain_timeout_s):
            async with trio.open_nursery() as nursery:
                for _ in range(settings.receivers):
                    nursery.start_soon(receiver)
        out.seconds = time.monotonic() - started
        committed = [await consumer.committed(RECEIVE_TOPIC, q) for q in range(QUEUES)]
        if committed != ends:
            out.fail(f"committed offsets {committed}, the queues end at {ends}")
    out.answered = len(seen)
    if out.answered != settings.messages:
        out.fail(f"drained {out.answered} of {settings.messages}")
    out.latencies_s.sort()
    return out


async def preload(port: int, messages: int) -> None:
    """`messages` 1 KiB messages into RECEIVE_TOPIC's 4 queues, 16 sends in flight."""
    payload = b"r" * BODY_SIZE
    async with open_producer("127.0.0.1", port) as producer, trio.open_nursery() as nursery:
        for task in range(16):
            count = messages // 16 + (task < messages % 16)
            nursery.start_soon(_send_many, producer, task % QUEUES, count, payload)


async def _send_many(producer: Any, queue_id: int, count: int, payload: bytes) -> None:
    for _ in range(count):
        await producer.send(Message(RECEIVE_TOPIC, payload, queue_id=queue_id))


Path_ = GrpcPath | RemotingPath


def run_row(
    kind: str,
    family: str,
    paths: Sequence[Path_],
    settings: Settings,
    one: Callable[[Path_, int], Figures],
) -> int:
    """`repeat` runs per path, taking turns; print each path's median run and the ratios.
    Returns how many runs failed (a refused call, a message missing or twice)."""
    runs: dict[str, list[Figures]] = {path.name: [] for path in paths}
    for attempt in range(settings.repeat):
        for path in paths:
            runs[path.name].append(one(path, attempt))
    medians = {}
    void = 0
    for name, figures in runs.items():
        for failed in (f for f in figures if f.failed):
            print(f"{kind} {name} VOID failed={failed.failed} {failed.first_failure}", flush=True)
            void += 1
        median = sorted(figures, key=lambda f: f.msgs_per_s)[len(figures) // 2]
        medians[name] = median
        report(
            kind,
            path=name,
            client=CLIENTS[family, name],
            msgs_per_s=median.msgs_per_s,
            p50_ms=median.p50_ms,
            p99_ms=median.p99_ms,
            broker_cpu_us_msg=median.broker_cpu_us_msg,
            client_cpu_us_msg=median.client_cpu_us_msg,
            messages=median.messages,
            runs="/".join(str(round(f.msgs_per_s)) for f in figures),
        )
    grpc, remoting = medians["grpc"], medians["remoting"]
    report(
        f"ratio {kind}",
        msgs_grpc_over_remoting=_over(grpc.msgs_per_s, remoting.msgs_per_s),
        p99_grpc_over_remoting=_over(grpc.p99_ms, remoting.p99_ms),
        cpu_grpc_over_remoting=_over(grpc.broker_cpu_us_msg, remoting.broker_cpu_us_msg),
    )
    return void


def _over(ours: float, other: float) -> float:
    return ours / other if other else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    import grpc

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=3.0, help="measured s per send run")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured s before it")
    parser.add_argument("--concurrency", type=int, default=8, help="sends in flight")
    parser.add_argument("--messages", type=int, default=10_000, help="preloaded to receive")
    parser.add_argument("--batch", type=int, default=32, help="messages a receive or pull")
    parser.add_argument("--receivers", type=int, default=4, help="receives in flight")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row and path")
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    settings = Settings(
        args.duration,
        args.warmup,
        args.concurrency,
        args.messages,
        args.batch,
        args.receivers,
        args.repeat,
        args.drain_timeout,
    )
    print_machine()
    failed = 0
    with ExitStack() as stack:
        grpc_broker = stack.enter_context(
            BrokerProcess(BrokerOptions(config={**BROKER_CONFIG, "grpc_listen": "127.0.0.1:0"}))
        )
        remoting_broker = stack.enter_context(BrokerProcess(BrokerOptions(config=BROKER_CONFIG)))
        idle = {"grpc": _rss(grpc_broker), "remoting": _rss(remoting_broker)}
        channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{grpc_broker.grpc_port}"))
        paths: list[Path_] = [GrpcPath(grpc_broker, channel), RemotingPath(remoting_broker)]
        for concurrency in sorted({1, settings.concurrency}):

            def send(path: Path_, _: int, concurrency: int = concurrency) -> Figures:
                return path.send(settings, concurrency)

            failed += run_row(f"send_1k_x{concurrency}", "send", paths, settings, send)
        for broker in (grpc_broker, remoting_broker):
            trio.run(preload, broker.port, settings.messages)

        def receive(path: Path_, attempt: int) -> Figures:
            return path.receive(settings, f"bench-{path.name}-{attempt}")

        failed += run_row(f"receive_1k_b{settings.batch}", "receive", paths, settings, receive)
        for name, broker in (("grpc", grpc_broker), ("remoting", remoting_broker)):
            report("footprint", path=name, idle_rss_mib=idle[name], after_rss_mib=_rss(broker))
    print(f"done {load_average()}", flush=True)
    return 1 if failed else 0


def _rss(broker: BrokerProcess) -> float:
    assert broker.pid is not None
    return rss_mib(broker.pid)


if __name__ == "__main__":
    raise SystemExit(main())
