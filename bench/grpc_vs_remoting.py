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
  For reference, after the pulls, the same drain by 4.x's pop on the remoting broker
  (`remoting_pop`: POP_MESSAGE of `--batch` + one ACK_MESSAGE per message, a task per queue):
  the pop semantics a 5.x receive is built on, without gRPC.

Each row prints msgs/s, p50/p99 (ack latency of a send; one batch read of a receive), the
broker's CPU time per message and this process's (the client's), from /proc, then a `ratio`
line grpc / each other path; the brokers' resident memory idle and after the runs ends it
(`rss`, and `anon` without the pages of the files it maps: the commit log, the index).

    .venv/bin/python bench/grpc_vs_remoting.py [--duration 3] [--concurrency 8] [--messages 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _remoting_client as remoting
from bench._common import (
    anon_rss_mib,
    cpu_seconds,
    load_average,
    percentile,
    print_machine,
    report,
    rss_mib,
)
from bench._grpc_client import Outcome, drain, drive_sends, send_requests
from bench._loadgen import TOPIC, Load, Target
from broker.pop.service import MAX_POP_NUMS
from rmq_client import BrokerOptions, BrokerProcess

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
    ("receive", "remoting_pop"): "rmq_client",
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


Run = Callable[[int], Figures]


class GrpcPath:
    def __init__(self, broker: BrokerProcess, channel: Any, settings: Settings) -> None:
        self.broker = broker
        self.channel = channel
        self.settings = settings
        self.requests = send_requests(TOPIC, BODY_SIZE)
        drive_sends(channel, self.requests[:50], 1, 0.0, 0.3)  # topic, connection, imports

    def send(self, concurrency: int) -> Run:
        def run(_: int) -> Figures:
            s = self.settings
            return measured(
                self.broker,
                lambda: drive_sends(
                    self.channel, self.requests, concurrency, s.warmup_s, s.duration_s
                ),
            )

        return run

    def receive(self, attempt: int) -> Figures:
        s = self.settings
        return measured(
            self.broker,
            lambda: drain(
                self.channel,
                f"bench-grpc-{attempt}",
                RECEIVE_TOPIC,
                s.messages,
                receivers=s.receivers,
                batch=s.batch,
                timeout_s=s.drain_timeout_s,
            ),
        )


class RemotingPath:
    def __init__(self, broker: BrokerProcess, settings: Settings) -> None:
        self.broker = broker
        self.settings = settings
        self.target = Target("remoting", "127.0.0.1", broker.port)
        remoting.sender(self.target, Load(1, 1, BODY_SIZE, 0.3, 0.0))()  # topic, imports

    def send(self, concurrency: int) -> Run:
        def run(_: int) -> Figures:
            s = self.settings
            load = Load(1, concurrency, BODY_SIZE, s.duration_s, s.warmup_s)
            return measured(self.broker, remoting.sender(self.target, load))

        return run

    def receive(self, attempt: int) -> Figures:
        s = self.settings
        drain_all = partial(
            remoting.pull_drain,
            receivers=s.receivers,
            batch=s.batch,
            timeout_s=s.drain_timeout_s,
        )
        return measured(
            self.broker,
            lambda: trio.run(
                drain_all, self.broker.port, f"bench-pull-{attempt}", RECEIVE_TOPIC, s.messages
            ),
        )

    def pop(self, attempt: int) -> Figures:
        s = self.settings
        drain_all = partial(remoting.pop_drain, batch=s.batch, timeout_s=s.drain_timeout_s)
        return measured(
            self.broker,
            lambda: trio.run(
                drain_all, self.broker.port, f"bench-pop-{attempt}", RECEIVE_TOPIC, s.messages
            ),
        )


def run_row(
    kind: str,
    family: str,
    repeat: int,
    turns: dict[str, Run],
    after: dict[str, Run] | None = None,
) -> int:
    """`repeat` runs of each of `turns`, taking turns, then of each of `after`; print each
    one's median run (by msgs/s) and the ratios of grpc to the others. Returns how many runs
    failed (a refused call, a message missing or twice)."""
    runs: dict[str, list[Figures]] = {name: [] for name in [*turns, *(after or {})]}
    for attempt in range(repeat):
        for name, run in turns.items():
            runs[name].append(run(attempt))
    for name, run in (after or {}).items():
        runs[name] = [run(attempt) for attempt in range(repeat)]
    medians = {}
    void = 0
    for name, figures in runs.items():
        for failed in (f for f in figures if f.failed):
            print(f"{kind} {name} VOID failed={failed.failed} {failed.first_failure}", flush=True)
            void += 1
        median = sorted(figures, key=lambda f: f.msgs_per_s)[len(figures) // 2]
        medians[name] = median
        latency = {"p50_ms": median.p50_ms, "p99_ms": median.p99_ms} if median.p99_ms else {}
        report(
            kind,
            path=name,
            client=CLIENTS[family, name],
            msgs_per_s=median.msgs_per_s,
            **latency,
            broker_cpu_us_msg=median.broker_cpu_us_msg,
            client_cpu_us_msg=median.client_cpu_us_msg,
            messages=median.messages,
            runs="/".join(str(round(f.msgs_per_s)) for f in figures),
        )
    grpc = medians.pop("grpc")
    ratios: dict[str, float] = {}
    for name, other in medians.items():
        ratios[f"msgs_grpc_over_{name}"] = _over(grpc.msgs_per_s, other.msgs_per_s)
        if other.p99_ms:
            ratios[f"p99_grpc_over_{name}"] = _over(grpc.p99_ms, other.p99_ms)
        ratios[f"cpu_grpc_over_{name}"] = _over(grpc.broker_cpu_us_msg, other.broker_cpu_us_msg)
    report(f"ratio {kind}", **ratios)
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
    if min(args.duration, args.concurrency, args.messages, args.receivers, args.repeat) <= 0:
        parser.error("--duration, --concurrency, --messages, --receivers, --repeat must be > 0")
    if not 1 <= args.batch <= MAX_POP_NUMS:
        parser.error(f"--batch must be within 1..{MAX_POP_NUMS} (the most a pop hands out)")
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
        brokers = {"grpc": grpc_broker, "remoting": remoting_broker}
        idle = {name: _memory(broker) for name, broker in brokers.items()}
        channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{grpc_broker.grpc_port}"))
        grpc_path = GrpcPath(grpc_broker, channel, settings)
        remoting_path = RemotingPath(remoting_broker, settings)
        for n in sorted({1, settings.concurrency}):
            turns = {"grpc": grpc_path.send(n), "remoting": remoting_path.send(n)}
            failed += run_row(f"send_1k_x{n}", "send", settings.repeat, turns)
        for broker in (grpc_broker, remoting_broker):
            trio.run(remoting.preload, broker.port, RECEIVE_TOPIC, settings.messages, BODY_SIZE)
        failed += run_row(
            f"receive_1k_b{settings.batch}",
            "receive",
            settings.repeat,
            {"grpc": grpc_path.receive, "remoting": remoting_path.receive},
            # after the pulls: the revive work a pop leaves behind never falls in their figures
            {"remoting_pop": remoting_path.pop},
        )
        for name, broker in brokers.items():
            (idle_rss, idle_anon), (after_rss, after_anon) = idle[name], _memory(broker)
            report(
                "footprint",
                path=name,
                idle_rss_mib=idle_rss,
                idle_anon_mib=idle_anon,
                after_rss_mib=after_rss,
                after_anon_mib=after_anon,
            )
    print(f"done {load_average()}", flush=True)
    return 1 if failed else 0


def _memory(broker: BrokerProcess) -> tuple[float, float]:
    """The broker's resident memory and the anonymous part of it (no mapped file pages)."""
    assert broker.pid is not None
    return rss_mib(broker.pid), anon_rss_mib(broker.pid)


if __name__ == "__main__":
    raise SystemExit(main())
