"""What an admin command prints: a `Report` holds the answer as data (what `--json` prints)
and as tables and lines for a person.

Three ways out, chosen per run: `--json` prints the data as one JSON document; a terminal gets
rich tables (the column names of mqadmin's output); anything else (a pipe, a file) gets plain
text, one tab-separated line per row under a `#`-prefixed header line, for grep and awk.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table as RichTable


@dataclass(slots=True)
class Table:
    columns: list[str]
    rows: list[list[object]] = field(default_factory=list)
    title: str | None = None

    def add(self, *cells: object) -> None:
        self.rows.append(list(cells))


@dataclass(slots=True)
class Report:
    #: the answer for `--json` (JSON-able: dicts, lists, strings, numbers)
    data: Any
    tables: list[Table] = field(default_factory=list)
    #: lines printed after the tables (totals, "success" lines)
    lines: list[str] = field(default_factory=list)
    #: some broker failed: the exit code is 1
    failed: bool = False
    #: one line per failed broker, for stderr (a change made on the others is still shown)
    errors: list[str] = field(default_factory=list)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def render(report: Report, *, as_json: bool, out: TextIO | None = None) -> None:
    """Print `report` to `out` (stdout) in the form the run asks for."""
    stream = out if out is not None else sys.stdout
    if as_json:
        stream.write(json.dumps(report.data, indent=2, ensure_ascii=False) + "\n")
        return
    console = Console(file=stream, highlight=False, soft_wrap=False)
    if console.is_terminal:
        _rich(report, console)
    else:
        _plain(report, stream)
    stream.flush()


def _rich(report: Report, console: Console) -> None:
    for table in report.tables:
        rich_table = RichTable(title=table.title, title_justify="left", header_style="bold")
        for column in table.columns:
            rich_table.add_column(column, overflow="fold")
        for row in table.rows:
            rich_table.add_row(*(_cell(c) for c in row))
        console.print(rich_table)
    for line in report.lines:
        console.print(line, markup=False)


def _plain(report: Report, stream: TextIO) -> None:
    for index, table in enumerate(report.tables):
        if index:
            stream.write("\n")
        if table.title:
            stream.write(f"{table.title}\n")
        stream.write("#" + "\t#".join(table.columns) + "\n")
        for row in table.rows:
            stream.write("\t".join(_cell(c) for c in row) + "\n")
    if report.tables and report.lines:
        stream.write("\n")
    for line in report.lines:
        stream.write(line + "\n")
