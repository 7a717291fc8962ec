"""Recovery that is itself interrupted or repeated, under the real daemon (TOML-configured).

- A torn tail cut twice at the same offset (the broker crashes again before writing past the
  first cut): the bytes of both cuts must still be kept aside, the second must not overwrite the
  first (`<segment>.truncated-<offset>` names only the offset).
- The broker SIGKILLed again and again while it is starting up and recovering a torn tail over
  many tiny segments: the next start serves, the valid prefix is intact record for record, the
  torn bytes are kept aside, and the next message lands where the torn record began.
"""

from __future__ import annotations

import pathlib
import random
import time

import trio

from broker.client import Message, SendStatus, open_producer
from protocol.msgid import decode_offset_msg_id
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
    tear(store_dir, end, torn)
    started = time.monotonic()
    TomlDaemon(config).kill()
    # Kills aimed at the last part of startup, where the store recovers and cuts the tail.
    startup_s = time.monotonic() - started
    stages = {"importing": 0, "recovering": 0, "after_cut": 0, "listening": 0}
    for _ in range(INTERRUPTED_STARTS):
        tear(store_dir, end, torn)  # every start has the tail to cut, as after a fresh crash
        starting = TomlDaemon(config, wait=False)
        time.sleep(startup_s * rng.uniform(0.5, 1.0))
        starting.kill()
        stage = (
            "listening"
            if starting.events("listening")
            else "after_cut"
            if starting.events("commit_log_truncated")
            else "recovering"
            if starting.events("startup")
            else "importing"
        )
        stages[stage] += 1
    daemon = TomlDaemon(config)
    try:
        assert records(store_dir) == valid
        assert any(b"torn-tail-marker" in data for data in kept_aside(store_dir))
        assert trio.run(send, daemon.port, 1) == [end]
    finally:
        assert daemon.stop() == 0
    print(f"recovery_repeat records={len(valid)} segments={end // SEGMENT_SIZE + 1} kills={stages}")
