"""Coverage-guided fuzzing of whole request sequences against a running broker (atheris).

    .venv/bin/python -m tests.reliability.atheris_requests -seed=1 -len_control=0 -max_len=1024

The broker (`broker.server.serve`, instrumented) runs in a thread of this process on a temporary
store and a loopback port; each fuzz input becomes a script of requests
(`request_script.build_script`) written pipelined on one of a few connections. For every input:
each request owed an answer gets one (a suspended pull within its longest suspension), the
frames before a corrupted one included, and the broker logs no exception it did not expect
(`processor_failed` and the like). Every `BATCH` inputs, and after the last input when
`FUZZ_INPUTS` sets a count, a health check: on a new connection a round of valid
requests that touch the shared tables (`fuzz_lane.healthy_broker`: send, heartbeat, consumer
list, pull, send-back, offset commit and query) is answered as it should within
`HEALTH_CHECK_S`, the process's anonymous RSS stays under `RSS_BUDGET_MB` and its descriptors
under what the configuration allows (`fd_budget`). A failure raises, so libFuzzer reports it
with the broker's latest events and writes the input that caused it. `FUZZ_STATS` names a JSON file
that gets the counts after each health check. `FUZZ_FLUSH` (ASYNC_FLUSH or SYNC_FLUSH) and
`FUZZ_STORE` (the store directory) configure the broker.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import queue
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import MutableMapping
from typing import Any

import atheris  # type: ignore[import-untyped]
import structlog
import trio

with atheris.instrument_imports():
    from broker.config import build_config
    from broker.server import serve
    from protocol.msgid import InvalidMessageIdError, decode_offset_msg_id
    from store.open_files import DEFAULT_CAPACITY
    from tests.reliability.fuzz_lane import Lane, healthy_broker
    from tests.reliability.fuzz_values import Memory
    from tests.reliability.request_script import build_script

BATCH = 250
HEALTH_CHECK_S = 5.0
RSS_BUDGET_MB = 300
#: descriptors besides the open consume-queue files and the commit-log segments: sockets,
#: the lanes, files the broker and the fuzzer keep open
FD_SLACK = 128
#: `FUZZ_INPUTS`: stop after this many inputs, with a last health check
DEBUG = bool(os.environ.get("FUZZ_DEBUG"))
LIMIT = int(os.environ.get("FUZZ_INPUTS", "0"))
#: log events that only an exception the broker did not expect produces
UNEXPECTED = frozenset(
    {
        "processor_failed",
        "connection_failed",
        "response_encode_failed",
        "put_callback_failed",
        "send_response_failed",
        "refusal_log_failed",
    }
)

findings: list[dict[str, Any]] = []
#: the broker's latest events, shown with a failure
recent: collections.deque[str] = collections.deque(maxlen=40)
stats: Counter[str] = Counter()


def capture(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> Any:
    recent.append(" ".join(f"{k}={str(v)[:200]}" for k, v in event.items()))
    if event.get("event") in UNEXPECTED or event.get("level") in ("error", "critical"):
        findings.append({k: str(v)[:500] for k, v in event.items()})
    raise structlog.DropEvent


def start_broker(store_dir: str) -> int:
    """Serve a broker in a daemon thread; its port once it listens."""
    config = build_config(
        {
            "listen": "127.0.0.1:0",
            # the two flush types run beside each other: neither may take the default gRPC port
            "grpc_listen": "none",
            "store_path_root_dir": store_dir,
            "mapped_file_size_commit_log": 1 << 20,
            "flush_disk_type": os.environ.get("FUZZ_FLUSH", "ASYNC_FLUSH"),
            "auto_create_topic_max_num": 300,
            "auto_create_subscription_group_max_num": 300,
        }
    )
    ports: queue.Queue[int | BaseException] = queue.Queue()

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(lambda task_status: serve(config, task_status=task_status))
            ports.put(server.port)

    def main() -> None:
        try:
            trio.run(run)
        except BaseException as exc:
            ports.put(exc)
        findings.append({"event": "broker_thread_ended"})

    threading.Thread(target=main, name="broker", daemon=True).start()
    port = ports.get(timeout=120)
    if isinstance(port, BaseException):
        raise port
    return port


def status_value(key: str) -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class Fuzzer:
    def __init__(self, port: int, store_dir: str) -> None:
        self.port = port
        self.store_dir = store_dir
        self.memory = Memory()
        self.lanes = [Lane(port) for _ in range(3)]
        self.next_opaque = 1
        self.inputs = 0

    def one_input(self, data: bytes) -> None:
        src = atheris.FuzzedDataProvider(data)
        requests, corrupt = build_script(src, self.memory, self.next_opaque)
        self.next_opaque += len(requests) + 1
        lane_index = self.inputs % len(self.lanes)
        lane = self.lanes[lane_index]
        try:
            for code, response in lane.exchange(requests):
                self.learn(code, response)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; the broker's latest events:\n" + "\n".join(recent)
            ) from None
        if corrupt or lane.closed or lane.suspended > 8:
            lane.close()
            self.lanes[lane_index] = Lane(self.port)
        stats["requests"] += len(requests)
        stats["corrupt"] += corrupt
        self.inputs += 1
        if findings:
            raise AssertionError(f"the broker reported {findings[:3]}")
        if self.inputs % BATCH == 1 or self.inputs == LIMIT:
            self.health_check()
        if self.inputs == LIMIT:
            sys.stderr.write(f"finished {LIMIT} inputs {json.dumps(dict(stats))}\n")
            sys.stderr.flush()
            os._exit(0)  # libFuzzer has no orderly stop after a given input

    def learn(self, code: int, response: Any) -> None:
        stats[f"{code}->{response.code}"] += 1
        if DEBUG and response.code == 1:
            print(code, response.remark, file=sys.stderr)
        fields = response.ext_fields
        msg_id = fields.get("msgId", "")
        if response.code != 0 or not msg_id:
            return
        try:
            _ip, _port, offset = decode_offset_msg_id(msg_id.split(",")[0])
            queue_offset = int(fields.get("queueOffset", "0"))
        except (InvalidMessageIdError, ValueError):
            return
        self.memory.remember(offset, msg_id.split(",")[0], queue_offset)

    def fd_budget(self) -> int:
        """The configured bound: open consume-queue files at most, one per commit-log segment
        (retention bounds their number), and `FD_SLACK`."""
        segments = len(os.listdir(pathlib.Path(self.store_dir) / "commitlog"))
        return DEFAULT_CAPACITY + segments + FD_SLACK

    def health_check(self) -> None:
        elapsed = healthy_broker(self.port, timeout_s=HEALTH_CHECK_S)
        rss_mb = status_value("RssAnon") / 1024
        fds = len(os.listdir("/proc/self/fd"))
        assert rss_mb < RSS_BUDGET_MB, f"anonymous RSS {rss_mb:.0f} MiB over {RSS_BUDGET_MB}"
        budget = self.fd_budget()
        assert fds < budget, f"{fds} open descriptors, over {budget}"
        stats["health_checks"] += 1
        stats["max_rss_mb"] = max(stats["max_rss_mb"], round(rss_mb))
        stats["max_fds"] = max(stats["max_fds"], fds)
        stats["max_health_check_ms"] = max(stats["max_healthy_broker_ms"], round(elapsed * 1000))
        stats["inputs"] = self.inputs
        target = os.environ.get("FUZZ_STATS")
        if target:
            pathlib.Path(target).write_text(json.dumps(dict(stats)))


def main() -> None:
    structlog.configure(
        processors=[structlog.processors.add_log_level, capture],
        cache_logger_on_first_use=False,
    )
    store_dir = os.environ.get("FUZZ_STORE") or tempfile.mkdtemp(prefix="rmq-fuzz-")
    started = time.monotonic()
    fuzzer = Fuzzer(start_broker(store_dir), store_dir)
    print(f"broker on {fuzzer.port} after {time.monotonic() - started:.1f} s", file=sys.stderr)
    atheris.Setup(sys.argv, fuzzer.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
