"""A bounded coverage-guided run of whole request sequences against a running broker.

`atheris_requests.py` serves a broker in its own process and turns each fuzz input into a
pipelined script of requests; it fails (libFuzzer reports a crash and writes the input) when a
request is left unanswered, the broker logs an exception it did not expect, or a health check
after a batch finds a valid send refused or slow, anonymous RSS over its budget or descriptors
over theirs. Here it runs for a bounded number of inputs per flush mode (many more under
`RMQ_SOAK=1`), and the counts it writes show that the scripts reached the broker's shared
tables rather than being refused at the door.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.reliability.conftest import SOAK

ROOT = pathlib.Path(__file__).resolve().parents[2]
INPUTS = {"ASYNC_FLUSH": 200_000 if SOAK else 1_200, "SYNC_FLUSH": 50_000 if SOAK else 1_200}


def answered(stats: dict[str, int], request_code: int, response_code: int) -> int:
    return stats.get(f"{request_code}->{response_code}", 0)


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_request_sequences_never_poison_the_broker(tmp_path: pathlib.Path, flush: str) -> None:
    inputs = INPUTS[flush]
    stats_path = tmp_path / "stats.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability.atheris_requests",
            "-seed=1",
            "-len_control=0",
            "-max_len=1024",
            "-timeout=120",
            "-rss_limit_mb=2048",
            f"-artifact_prefix={tmp_path}/",
        ],
        env={
            "PATH": "/usr/bin:/bin",
            "FUZZ_INPUTS": str(inputs),
            "FUZZ_STATS": str(stats_path),
            "FUZZ_FLUSH": flush,
            "FUZZ_STORE": str(tmp_path / "store"),
        },
        capture_output=True,
        text=True,
        timeout=3600 if SOAK else 300,
        cwd=ROOT,
        check=False,
    )
    tail = "\n".join(line for line in done.stderr.splitlines() if "Instrumenting" not in line)
    assert done.returncode == 0, tail[-4000:]
    assert f"finished {inputs} inputs" in done.stderr, tail[-4000:]
    stats: dict[str, int] = json.loads(stats_path.read_text())
    print(f"request_fuzz flush={flush} {json.dumps(stats, sort_keys=True)}")
    assert stats["inputs"] == inputs
    assert stats["health_checks"] >= inputs // 250
    # The scripts got past the door: sends stored, heartbeats registered, offsets committed,
    # send-backs taken (response code 0), and requests of many kinds succeeded.
    for code in (310, 34, 15, 36):
        assert answered(stats, code, 0) > 0, f"no request of code {code} succeeded: {stats}"
    succeeded = {
        key.split("->")[0] for key, count in stats.items() if key.endswith("->0") and count
    }
    assert len(succeeded) >= 10, stats
    assert stats["corrupt"] > 0
