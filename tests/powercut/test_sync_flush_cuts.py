"""SYNC_FLUSH across power cuts: the broker is SIGKILLed at a random moment under concurrent
load from several connections, then everything no fsync covered is dropped (the cut comes after
the kill: the kernel hands over the dead process's dirty pages first, and they are lost too),
then the broker restarts on what survived. Some cuts land while the broker is recovering.

After every restart: every acknowledged message is in the log exactly once, at its offset, with
the topic, queue and queue offset its acknowledgement named; every queue's offsets run 0..n-1;
the broker accepts sends again. Right after each cut, before recovery, every acknowledged message
is already whole on disk and the checkpoint is not ahead of the log; a consumer that pulls and
commits meanwhile never finds its committed offsets past the end of its queues; at the end the
consume queues match the log. The cuts must have dropped something, or they proved nothing.
`RMQ_SOAK=1` runs many more cuts.
"""

from __future__ import annotations

import functools
import pathlib
import random
import time
from collections.abc import Sequence

import trio

from rmq_client.pull_consumer import open_pull_consumer
from store.decode import CommitLogRecord
from tests.powercut.checks import check_consume_queues, check_on_disk_after_cut
from tests.powercut.load import QUEUES, TOPICS, produce_then_kill
from tests.powercut.mount import PowerCutFS
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.conftest import SOAK, Daemon, read_records

CUTS = 40 if SOAK else 5
PRODUCERS = 3
SYNC = ("--flush-disk-type", "SYNC_FLUSH")
GROUP = "CutGroup"
#: consumer offsets are persisted often, so cuts land between their writes
ENV = {"RMQ_FLUSH_CONSUMER_OFFSET_INTERVAL_MS": "100"}
#: a request's bound: a broker just restarted over FUSE on a loaded machine may take seconds
LOADED_S = 30


async def committed_offsets(port: int) -> list[int | None]:
    async with open_pull_consumer("127.0.0.1", port, GROUP, timeout_s=LOADED_S) as client:
        await client.subscribe(TOPICS[0])
        return [await client.committed(TOPICS[0], q) for q in range(QUEUES)]


def check_committed_offsets(port: int, records: Sequence[CommitLogRecord]) -> int:
    """The group's committed offsets never point past the end of their queue in the log; their
    sum."""
    committed = trio.run(committed_offsets, port)
    for queue_id, offset in enumerate(committed):
        stored = sum(1 for r in records if (r.topic, r.queue_id) == (TOPICS[0], queue_id))
        assert offset is None or offset <= stored, (
            f"committed offset {offset} of {TOPICS[0]}/{queue_id} is past its {stored} messages"
        )
    return sum(offset or 0 for offset in committed)


def cut_during_recovery(
    powercut: PowerCutFS, store_dir: pathlib.Path, brokers: list[Daemon], rng: random.Random
) -> bool:
    """Start the broker and cut the power once it has begun opening the store (`startup`);
    whether the cut landed before it was serving (`listening`)."""
    daemon = Daemon(store_dir, *SYNC, env=ENV, wait=False)
    brokers.append(daemon)
    daemon.wait_for("startup")
    time.sleep(rng.uniform(0.0, 0.01))
    daemon.kill()
    powercut.cut(seed=rng.randrange(1 << 30))
    powercut.mount()
    return daemon.count("listening") == 0


def test_sync_flush_loses_nothing_acknowledged_across_power_cuts(
    powercut: PowerCutFS, brokers: list[Daemon]
) -> None:
    store_dir = powercut.mountpoint / "store"
    rng = random.Random(21)
    acked: dict[int, Ack] = {}
    dropped = in_recovery = 0
    for cycle in range(CUTS):
        daemon = Daemon(store_dir, *SYNC, env=ENV)
        brokers.append(daemon)
        records = read_records(store_dir)
        check_acknowledged(records, acked)
        check_committed_offsets(daemon.port, records)
        acks: dict[int, Ack] = {}
        load = trio.run(
            functools.partial(
                produce_then_kill,
                daemon.port,
                acks,
                producers=PRODUCERS,
                tag=f"c{cycle}",
                rng=rng,
                seconds=rng.uniform(0.3, 1.5),
                kill=daemon.kill,
                group=GROUP,
            )
        )
        assert acks, f"cut {cycle}: nothing acknowledged before the cut ({load})"
        assert not acks.keys() & acked.keys(), "an offset was acknowledged twice"
        acked.update(acks)
        # every other cut lets some unsynced pages reach the disk, and tears the last one
        odds = (0.3, 0.5) if cycle % 2 else (0.0, 0.0)
        stats = powercut.cut(seed=cycle, keep=odds[0], tear=odds[1])
        dropped += stats["pages_dropped"] + stats["bytes_truncated"]
        powercut.mount()
        check_on_disk_after_cut(store_dir, acked)
        if cycle % 2 == 1:
            in_recovery += cut_during_recovery(powercut, store_dir, brokers, rng)
    daemon = Daemon(store_dir, *SYNC, env=ENV)
    brokers.append(daemon)
    records = read_records(store_dir)
    assert check_committed_offsets(daemon.port, records), "the consumer committed nothing"
    check_acknowledged(records, acked)
    assert daemon.stop() == 0
    check_consume_queues(store_dir, records)
    assert dropped, "no cut dropped anything: the file system did not model a power cut"
    assert in_recovery, "no cut landed while the broker was opening its store"
    print(
        f"powercut_sync_flush cuts={CUTS} in_recovery={in_recovery} "
        f"acknowledged={len(acked)} dropped={dropped}"
    )
