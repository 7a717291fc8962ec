"""bench/startup.py runs end to end and prints its five rows with figures that hang together."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "startup.py"


def test_one_run_prints_every_row() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = {
        name: dict(part.split("=") for part in rest)
        for name, *rest in (line.split() for line in result.stdout.splitlines())
    }
    assert list(rows) == [
        "startup_to_first_log",
        "startup_to_listening",
        "startup_to_first_ack",
        "graceful_stop",
        "idle_rss",
    ]
    first_log, listening, acked = (
        float(rows[name]["median_ms"])
        for name in ("startup_to_first_log", "startup_to_listening", "startup_to_first_ack")
    )
    assert 0 < first_log <= listening <= acked
    assert float(rows["idle_rss"]["median_mib"]) > 0
