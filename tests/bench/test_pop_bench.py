"""bench/pop.py runs end to end: every message sent is pulled once and popped and acked once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "pop.py"


def test_a_small_run_pops_and_acks_what_it_pulled() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--messages", "640"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    name, *parts = line.split()
    row = dict(part.split("=") for part in parts)
    assert name == "pop_throughput"
    assert int(row["pulled"]) == int(row["popped"]) == 640
    assert float(row["pop_ack_msgs_s"]) > 0
