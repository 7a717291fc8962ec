"""The cost of a SQL92 subscription on the read path, per record a pull or pop looks at.

Encodes N records as the store holds them (1 KiB bodies; TAGS, KEYS, UNIQ_KEY, WAIT and three
user properties) and times `TagFilter.matches_record` over them: a TAG filter (decode, compare
TAGS) beside SQL92 selectors of growing size (decode every property, evaluate). Also the cost
of compiling an expression the first time (later ones hit the cache). A pull looks at up to 800
units, so 800 x the per-record figure bounds the filter's share of one pull.

    .venv/bin/python bench/sql_filter.py [--records N] [--rounds R]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import print_machine, report
from protocol.properties import encode_properties
from store.encode import encode_record
from store.get_message import MAX_SCAN_UNITS, TagFilter
from store.message import MessageExtBrokerInner
from store.sql_filter import compile_sql
from store.sql_filter.parser import parse

SELECTORS = {
    "sql_one": "a > 5",
    "sql_three": "a > 5 AND region IN ('eu', 'us') AND TAGS = 'TagA'",
    "sql_nine": (
        "(a BETWEEN 10 AND 500 OR price > 99.5) AND region NOT IN ('asia', 'africa') "
        "AND (missing IS NULL OR missing = 'x') AND NOT (KEYS = 'none') AND TAGS <> 'TagZ'"
    ),
}


def build_records(count: int) -> list[bytes]:
    records = []
    for n in range(count):
        properties = encode_properties(
            {
                "TAGS": "TagA" if n % 2 else "TagB",
                "KEYS": f"order_{n}",
                "UNIQ_KEY": f"7F0000011A2B18B4AAC2{n:012X}",
                "WAIT": "true",
                "a": str(n % 1000),
                "region": ("eu", "us", "asia")[n % 3],
                "price": f"{n % 200}.25",
            }
        )
        message = MessageExtBrokerInner("BenchTopic", n % 4, bytes(1024), properties)
        encoded = encode_record(message, 1795332302031, 4 * 1024 * 1024)
        assert isinstance(encoded, tuple)
        records.append(encoded[0])
    return records


def time_filter(wanted: TagFilter, records: list[bytes], rounds: int) -> tuple[float, int]:
    """Best microseconds per record over `rounds`, and how many matched."""
    best = float("inf")
    matched = 0
    for _ in range(rounds):
        started = time.perf_counter()
        matched = sum(1 for data in records if wanted.matches_record(data))
        best = min(best, time.perf_counter() - started)
    return best / len(records) * 1e6, matched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print_machine()
    records = build_records(args.records)
    tag_us, tag_matched = time_filter(TagFilter.parse("TagA"), records, args.rounds)
    report("filter_tag", us_per_record=tag_us, matched=tag_matched, records=len(records))
    for name, text in SELECTORS.items():
        us, matched = time_filter(TagFilter(sql=compile_sql(text)), records, args.rounds)
        report(
            f"filter_{name}",
            us_per_record=us,
            vs_tag=us / tag_us,
            ms_per_full_scan=us * MAX_SCAN_UNITS / 1000,
            matched=matched,
        )
        started = time.perf_counter()
        for _ in range(200):
            parse(text)
        report(f"compile_{name}", us=(time.perf_counter() - started) / 200 * 1e6, chars=len(text))


if __name__ == "__main__":
    main()
