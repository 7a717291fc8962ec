"""Send throughput of N brokers in one cluster on this machine, with one load generator.

Starts a standalone name server (`rmq-broker namesrv`) and N brokers (`broker-0`..) registered
with it, then for N = 1..--brokers runs the same load: P connections x W requests in flight of
SEND_MESSAGE_V2 (a Java client's header, as bench/send.py), the connections spread evenly over
the N brokers, one generator process per broker. Prints msgs/s and p50/p99 ack latency per
broker and for the cluster, and each broker's CPU per message; checks through the name server
that every broker registered and that the bench topic's route lists them all.

    .venv/bin/python bench/cluster_send.py [--brokers 3] [--row ASYNC-8x16-1KiB] [--duration 3]

(`bench/send.py --brokers N` runs this.) On a machine with fewer cores than brokers + the
generator, the total cannot grow with N: the point is the per-broker figures and that the
cluster runs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import subprocess
import sys
import time
from array import array
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import report
from bench._loadgen import TOPIC, Load, Share, ShareResult, Target
from bench._loadgen_report import Figures, Row, figures
from bench._loadgen_servers import BROKER_EXECUTABLE, Server, free_port, running
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.route import TopicRouteData

OUT: Final = Path(__file__).resolve().parent / "out"
_FORK: Final = multiprocessing.get_context("fork")


def _share_main(
    target: Target,
    load: Load,
    indexes: list[int],
    results: multiprocessing.Queue[tuple[int, ShareResult | str]],
) -> None:
    try:
        share = Share(target, load, indexes)
        results.put((target.port, share.run(time.monotonic() + 0.2)))
    except Exception as exc:  # the parent prints it and voids the run
        results.put((target.port, f"{type(exc).__name__}: {exc}"))


def drive(brokers: Sequence[Server], row: Row, duration_s: float) -> dict[str, Figures]:
    """The row's connections over `brokers` (connection i to broker i mod N); figures per
    broker name and for "cluster"."""
    load = Load(row.connections, row.window, row.body_size, duration_s, 0.5)
    results: multiprocessing.Queue[tuple[int, ShareResult | str]] = _FORK.Queue()
    workers = []
    cpu_before = {b.port: b.cpu_seconds() for b in brokers}
    for n, broker in enumerate(brokers):
        indexes = list(range(n, row.connections, len(brokers)))
        target = Target("remoting", "127.0.0.1", broker.port)
        workers.append(_FORK.Process(target=_share_main, args=(target, load, indexes, results)))
    for worker in workers:
        worker.start()
    shares: dict[int, ShareResult] = {}
    for _ in workers:
        port, payload = results.get(timeout=duration_s + 120)
        if not isinstance(payload, ShareResult):
            raise RuntimeError(f"generator for port {port}: {payload}")
        shares[port] = payload
    for worker in workers:
        worker.join()
    out: dict[str, Figures] = {}
    every = array("d")
    cpu_total = replies_total = 0.0
    for broker in brokers:
        share = shares[broker.port]
        latencies = array("d")
        latencies.frombytes(share.latencies_us)
        every.extend(latencies)
        cpu_s = broker.cpu_seconds() - cpu_before[broker.port]
        cpu_total += cpu_s
        replies_total += share.replies
        cpu_us = cpu_s * 1e6 / share.replies if share.replies else 0.0
        out[broker.name] = figures(
            latencies.tolist(), share.failed, share.unanswered, row, duration_s, cpu_us_msg=cpu_us
        )
    cpu_us = cpu_total * 1e6 / replies_total if replies_total else 0.0
    failed = sum(s.failed for s in shares.values())
    unanswered = sum(s.unanswered for s in shares.values())
    out["cluster"] = figures(every.tolist(), failed, unanswered, row, duration_s, cpu_us_msg=cpu_us)
    return out


@contextmanager
def namesrv(root: Path) -> Iterator[int]:
    """A standalone name server on a free loopback port; its port."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [sys.executable, "-m", "broker", "namesrv", "--listen", f"127.0.0.1:{port}"]
    command += ["--kv-config-path", str(root / "kvConfig.json")]
    with (root / "namesrv.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the name server did not start") from None
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(30)


def route(namesrv_port: int, topic: str) -> TopicRouteData | None:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    with socket.create_connection(("127.0.0.1", namesrv_port), timeout=5) as sock:
        sock.sendall(encode_frame(request))
        decoder = FrameDecoder()
        while not (answers := decoder.feed(sock.recv(65536))):
            pass
    if answers[0].code != ResponseCode.SUCCESS:
        return None
    return TopicRouteData.from_json(answers[0].body or b"{}")


def wait_registered(namesrv_port: int, count: int, topic: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        found = route(namesrv_port, topic)
        if found is not None and len(found.queue_datas) == count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: {found} after 30 s, wanted {count} brokers")
        time.sleep(0.2)


def run(max_brokers: int, row: Row, duration_s: float, executable: Path) -> None:
    with ExitStack() as stack:
        port = stack.enter_context(namesrv(OUT / "tmp" / "cluster"))
        env = {"RMQ_NAMESRV_ADDR": f"127.0.0.1:{port}", "RMQ_REGISTER_NAME_SERVER_PERIOD": "5000"}
        brokers: list[Server] = []
        for n in range(max_brokers):
            name = f"broker-{n}"
            brokers.append(
                stack.enter_context(
                    running(
                        "broker",
                        row.mode,  # type: ignore[arg-type]
                        OUT / "tmp",
                        executable,
                        extra_env={**env, "RMQ_BROKER_NAME": name},
                        name=name,
                    )
                )
            )
        wait_registered(port, max_brokers, "TBW102")
        for count in range(1, max_brokers + 1):
            result = drive(brokers[:count], row, duration_s)
            for name, fig in result.items():
                report(
                    f"cluster brokers={count} {row.name} {name}",
                    msgs_s=round(fig.msgs_s),
                    p50_ms=fig.p50_ms,
                    p99_ms=fig.p99_ms,
                    cpu_us_msg=fig.cpu_us_msg,
                    failed=fig.failed,
                    unanswered=fig.unanswered,
                )
        wait_registered(port, max_brokers, TOPIC)
        print(f"route of {TOPIC} from the name server lists all {max_brokers} brokers", flush=True)


def parse_row(text: str) -> Row:
    mode, shape, size = text.split("-")
    connections, window = shape.split("x")
    low = size.lower()
    body = int(low.removesuffix("kib")) * 1024 if "k" in low else int(low.removesuffix("b"))
    return Row(mode.upper(), int(connections), int(window), body)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--brokers", type=int, default=3, help="run with 1..N brokers")
    parser.add_argument("--row", default="ASYNC-12x16-1KiB", help="MODE-PxW-SIZE")
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per run")
    parser.add_argument("--broker-executable", type=Path, default=BROKER_EXECUTABLE)
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    run(args.brokers, parse_row(args.row), args.duration, args.broker_executable)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
