"""Recovery that is itself interrupted or repeated, under the real daemon (TOML-configured).

- A torn tail cut twice at the same offset (the broker crashes again before writing past the
  first cut): the bytes of both cuts must still be kept aside, the second must not overwrite the
  first (`<segment>.truncated-<offset>` names only the offset).
- The broker SIGKILLed again and again while it is recovering a torn tail over many tiny
  segments (each kill waits for a progress report of the scan, or for its end before the cut):
  the next start serves, the valid prefix is intact record for record, the torn bytes are kept
  aside, and the next message lands where the torn record began. Most kills must land inside
  recovery, at least one of them in the scan: the test checks that it tested what it names.
"""

from __future__ import annotations

import json
import pathlib
import random

import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from store.checkpoint import TOPIC_QUEUE_TABLE_FILE
from store.decode import CommitLogRecord
from store.reader import CommitLogReader
from tests.reliability.toml_daemon import SEGMENT_SIZE, TomlDaemon, write_config

INTERRUPTED_STARTS = 12


async def send(port: int, count: int, size: int = 200) -> list[int]:
    """Send `count` messages; the physical offsets their acknowledgements name."""
    offsets: list[int] = []
    async with open_producer("127.0.0.1", port, timeout_s=10) as client:
        for seq in range(count):
            body = b"%06d" % seq + b"r" * size
            result = await client.send(Message(f"Repeat{seq % 3}", body))
            assert result.status is SendStatus.SEND_OK
            offsets.append(decode_offset_msg_id(result.offset_msg_id)[2])
    return offsets


def records(store_dir: pathlib.Path) -> list[CommitLogRecord]:
    with CommitLogReader(str(store_dir)) as reader:
        return list(reader.iter_records(reader.min_offset, verify_crc=True))


def log_end(store_dir: pathlib.Path) -> int:
    last = records(store_dir)[-1]
    return last.physical_offset + last.total_size


def tear(store_dir: pathlib.Path, offset: int, data: bytes) -> None:
    """Write `data` at physical `offset`, as a record torn by a crash would have left it."""
    segment = store_dir / "commitlog" / f"{offset - offset % SEGMENT_SIZE:020d}"
    with open(segment, "r+b") as handle:
        handle.seek(offset % SEGMENT_SIZE)
        handle.write(data)


def fresh_crash(store_dir: pathlib.Path, end: int, torn: bytes) -> None:
    """The tail torn again, and no topic-queue table snapshot (a crash before the first one was
    written): the next start has the tail to cut and scans every segment, however far the
    checkpoint had got, so the scan is as long on a loaded machine as on an idle one."""
    tear(store_dir, end, torn)
    (store_dir / TOPIC_QUEUE_TABLE_FILE).unlink(missing_ok=True)


def kept_aside(store_dir: pathlib.Path) -> list[bytes]:
    return [
        path.read_bytes()
        for path in sorted((store_dir / "commitlog").iterdir())
        if ".truncated-" in path.name
    ]


def test_a_second_cut_at_the_same_offset_keeps_the_first_cut_bytes(
    tmp_path: pathlib.Path,
) -> None:
    store_dir = tmp_path / "store"
    config = write_config(tmp_path / "broker.toml", store_dir)
    daemon = TomlDaemon(config)
    trio.run(send, daemon.port, 5)
    daemon.kill()
    before = records(store_dir)
    end = log_end(store_dir)
    first, second = b"\xa1" * 100 + b"first-torn-write", b"\xb2" * 60 + b"second-torn-write"
    for torn in (first, second):
        tear(store_dir, end, torn)
        daemon = TomlDaemon(config)
        cuts = daemon.events("commit_log_truncated")
        assert [cut["offset"] for cut in cuts] == [end], cuts
        daemon.kill()  # crashes again before anything is written past the cut
    assert records(store_dir) == before
    kept = kept_aside(store_dir)
    assert any(second in data for data in kept), kept
    assert any(first in data for data in kept), "the second cut overwrote the first cut's bytes"
    daemon = TomlDaemon(config)
    assert trio.run(send, daemon.port, 1) == [end]
    assert daemon.stop() == 0


#: the log events that mark how far a start got
STAGES = ("recovery_progress", "commit_log_recovered", "commit_log_truncated", "listening")


def stage_at_kill(daemon: TomlDaemon) -> str:
    """How far the killed start got, from every line it wrote (read to the end of the pipe)."""
    while (line := daemon.lines.get(timeout=30)) is not None:
        daemon.seen.append(line)
    seen = {name for name in STAGES if daemon.events(name)}
    if "listening" in seen:
        return "listening"
    if "commit_log_truncated" in seen:
        return "after_cut"
    if "commit_log_recovered" in seen:
        return "cutting"
    if "recovery_progress" in seen:
        return "recovering"
    return "starting"


def kill_on(daemon: TomlDaemon, event: str, done: int | None = None) -> None:
    """SIGKILL `daemon` as soon as it logs `event` (with `done` files scanned, when given)."""
    while (line := daemon.lines.get(timeout=60)) is not None:
        daemon.seen.append(line)
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("event") == event and (done is None or record.get("done") == done):
            daemon.kill()
            return
    raise AssertionError(f"start ended before {event}:\n" + "".join(daemon.seen[-20:]))


def test_killed_again_and_again_while_recovering_then_serves_intact(
    tmp_path: pathlib.Path,
) -> None:
    store_dir = tmp_path / "store"
    config = write_config(tmp_path / "broker.toml", store_dir)
    rng = random.Random(0xC0FFEE)
    daemon = TomlDaemon(config)
    trio.run(send, daemon.port, 1500, 300)
    daemon.kill()
    valid = records(store_dir)
    end = log_end(store_dir)
    assert end > 10 * SEGMENT_SIZE  # recovery has many segments to walk
    torn = bytes(rng.randrange(256) for _ in range(150)) + b"torn-tail-marker"
    fresh_crash(store_dir, end, torn)
    full = TomlDaemon(config)
    full.kill()
    # The scan reports progress every few segments: each kill waits for one of those reports
    # (or for the end of the scan, before the cut) and lands at once, inside recovery.
    progress = [int(str(e["done"])) for e in full.events("recovery_progress")]
    assert len(progress) >= 4, full.seen
    targets: list[tuple[str, int | None]] = [
        *(("recovery_progress", done) for done in progress),
        ("commit_log_recovered", None),
    ]
    stages = dict.fromkeys(("starting", "recovering", "cutting", "after_cut", "listening"), 0)
    # Every target once, then random ones.
    plan = targets + [rng.choice(targets) for _ in range(INTERRUPTED_STARTS - len(targets))]
    for event, done in plan:
        fresh_crash(store_dir, end, torn)
        starting = TomlDaemon(config, wait=False)
        kill_on(starting, event, done)
        stages[stage_at_kill(starting)] += 1
    daemon = TomlDaemon(config)
    try:
        assert records(store_dir) == valid
        assert any(b"torn-tail-marker" in data for data in kept_aside(store_dir))
        assert trio.run(send, daemon.port, 1) == [end]
    finally:
        assert daemon.stop() == 0
    print(f"recovery_repeat records={len(valid)} segments={end // SEGMENT_SIZE + 1} kills={stages}")
    # The point of the test: starts were really interrupted while the store was recovering.
    assert stages["recovering"] >= 1, stages
    assert stages["recovering"] + stages["cutting"] >= INTERRUPTED_STARTS // 2, stages
