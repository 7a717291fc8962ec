"""bench/sql_filter.py runs end to end, and the matches it counts are the ones its records'
properties call for (so the figures time filters that do their work)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "sql_filter.py"


def test_one_small_run_prints_every_row_with_the_right_matches() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--records", "300", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = {
        name: dict(part.split("=", 1) for part in rest)
        for name, *rest in (line.split() for line in result.stdout.splitlines()[1:])
    }
    assert list(rows) == [
        "filter_tag",
        "filter_sql_one",
        "compile_sql_one",
        "filter_sql_three",
        "compile_sql_three",
        "filter_sql_nine",
        "compile_sql_nine",
    ]
    # record n: TAGS TagA for odd n, a = n, region eu/us/asia by n % 3
    assert rows["filter_tag"]["matched"] == "150"
    assert rows["filter_sql_one"]["matched"] == str(300 - 6)  # a > 5
    odd_not_asia = sum(1 for n in range(6, 300) if n % 2 and n % 3 != 2)
    assert rows["filter_sql_three"]["matched"] == str(odd_not_asia)
    assert all(float(rows[name]["us_per_record"]) > 0 for name in rows if "filter" in name)
