"""bench/grpc_vs_remoting.py runs end to end with tiny counts: every row on both paths (and the
pop reference), every preloaded message received once each way, and the CPU figures read from
/proc are the kernel's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench._common import cpu_seconds

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "grpc_vs_remoting.py"


def test_a_small_run_prints_each_row_for_both_paths_and_drains_every_message() -> None:
    flags = "--duration 0.3 --warmup 0.1 --concurrency 4 --messages 200 --batch 16 --repeat 1"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *flags.split()],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "VOID" not in result.stdout
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in result.stdout.splitlines():
        name, *parts = line.split()
        fields = dict(part.split("=", 1) for part in parts if "=" in part)
        if name == "ratio":
            rows[name, parts[0]] = fields
        elif "path" in fields:
            rows[name, fields["path"]] = fields
    for kind in ("send_1k_x1", "send_1k_x4", "receive_1k_b16"):
        for path in ("grpc", "remoting"):
            assert float(rows[kind, path]["msgs_per_s"]) > 0, (kind, path)
        assert float(rows["ratio", kind]["msgs_grpc_over_remoting"]) > 0
    assert rows["send_1k_x4", "grpc"]["client"] == "grpcio"
    assert rows["send_1k_x4", "remoting"]["client"] == "loadgen"
    assert rows["receive_1k_b16", "remoting"]["client"] == "rmq_client"
    assert rows["receive_1k_b16", "grpc"]["messages"] == "200"
    assert rows["receive_1k_b16", "remoting"]["messages"] == "200"
    assert rows["receive_1k_b16", "remoting_pop"]["messages"] == "200"
    assert float(rows["ratio", "receive_1k_b16"]["cpu_grpc_over_remoting_pop"]) > 0
    assert float(rows["footprint", "remoting"]["after_rss_mib"]) > 0
    grpc = rows["footprint", "grpc"]
    # the gRPC bindings and protobuf are imported at the first gRPC connection, not before
    assert float(grpc["after_anon_mib"]) > float(grpc["idle_anon_mib"]) > 0
    assert float(grpc["after_rss_mib"]) >= float(grpc["after_anon_mib"])


def test_cpu_seconds_reads_user_and_system_time_of_the_process() -> None:
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    times = psutil.Process().cpu_times()
    assert abs(cpu_seconds() - (times.user + times.system)) < 0.05
