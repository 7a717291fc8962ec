"""Running `rmq-broker admin ...` in the test process (click's runner, in a worker thread so
the test's own clients keep running on the event loop) against a broker in a subprocess (its
log stays out of the output the runner captures), and reading what it printed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import trio
from click.testing import CliRunner

from broker.cli import main
from rmq_client.producer import Message, Producer


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.code == 0, (self.code, self.stdout, self.stderr)
        return json.loads(self.stdout)

    def error_line(self, code: int = 1) -> str:
        """The one line on stderr of a run that failed with `code`; nothing on stdout."""
        assert self.code == code, (self.code, self.stdout, self.stderr)
        assert "Traceback" not in self.stderr + self.stdout
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("rmq-broker: admin ")
        return lines[0]


async def admin(*args: str) -> Run:
    def invoke() -> Run:
        result = CliRunner().invoke(main, ["admin", *args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Run(result.exit_code, result.stdout, result.stderr)

    return await trio.to_thread.run_sync(invoke)


def plain_rows(stdout: str) -> list[list[str]]:
    """The tab-separated rows under the first `#` header line, up to the first blank line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#"))
    rows = []
    for line in lines[start + 1 :]:
        if not line:
            break
        rows.append(line.split("\t"))
    return rows


async def send_per_queue(producer: Producer, topic: str, counts: tuple[int, ...]) -> None:
    for queue_id, count in enumerate(counts):
        for index in range(count):
            body = f"q{queue_id}-{index}".encode()
            await producer.send(Message(topic, body, keys=f"key-{queue_id}", queue_id=queue_id))
