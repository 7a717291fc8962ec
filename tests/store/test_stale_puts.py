"""Puts stuck behind a held-up writer: each is answered OS_PAGE_CACHE_BUSY once it has waited
`os_page_cache_busy_timeout_ms` without being appended, and is then never appended."""

from __future__ import annotations

import dataclasses

import trio

from store.config import MessageStoreConfig
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from store.status import PutMessageStatus
from tests.store.conftest import DEADLINE_S, StuckCreate, make_msg, wait_until

BUSY_MS = 100


async def test_puts_behind_a_stuck_writer_are_answered_busy_and_never_stored(
    config: MessageStoreConfig,
) -> None:
    config = dataclasses.replace(config, os_page_cache_busy_timeout_ms=BUSY_MS)
    answers: dict[str, tuple[PutMessageStatus, float, bool]] = {}
    create = StuckCreate()
    async with DefaultMessageStore.open(config, create_file=create) as store:

        async def put(label: str) -> None:
            started = trio.current_time()
            result = await store.put_message(make_msg(label.encode()))
            elapsed = trio.current_time() - started
            answers[label] = (result.status, elapsed, not create.released.is_set())

        with trio.fail_after(DEADLINE_S / 2):  # before the stuck creation gives up by itself
            async with trio.open_nursery() as nursery:
                # One group: the writer's first put (trio picks which) waits for the first
                # segment, the other two were taken with it and are not appended yet.
                for label in ("group-a", "group-b", "group-c"):
                    nursery.start_soon(put, label)
                await trio.to_thread.run_sync(create.entered.wait, DEADLINE_S)
                nursery.start_soon(put, "queued")  # waits in the writer's queue
                await wait_until(lambda: len(answers) == 3, DEADLINE_S)  # all but the holder
                create.released.set()
            await put("after")  # the writer is back: stored
    group = ("group-a", "group-b", "group-c")
    holders = [label for label in group if answers[label][0] is PutMessageStatus.PUT_OK]
    assert len(holders) == 1, answers
    assert answers["after"][0] is PutMessageStatus.PUT_OK
    for label in [*(label for label in group if label not in holders), "queued"]:
        put_status, elapsed, while_stuck = answers[label]
        assert put_status is PutMessageStatus.OS_PAGE_CACHE_BUSY, answers
        assert while_stuck, answers  # answered by the busy timeout, not when the writer is back
        assert elapsed >= BUSY_MS / 1000, answers  # not before it
    assert store.stats.put_count_by_status[PutMessageStatus.OS_PAGE_CACHE_BUSY] == 3
    with CommitLogReader(config.store_path_root_dir) as reader:
        bodies = [rec.body for rec in reader.iter_records(reader.min_offset)]
    assert bodies == [holders[0].encode(), b"after"]


async def test_a_healthy_writer_answers_nothing_busy_before_the_timeout(
    config: MessageStoreConfig,
) -> None:
    """Only a put that waited the whole busy timeout may be answered busy: on a loaded machine
    a healthy writer can be that slow (and then busy is right), but a younger put never is."""
    config = dataclasses.replace(config, os_page_cache_busy_timeout_ms=BUSY_MS)
    async with DefaultMessageStore.open(config) as store:
        answers: list[tuple[PutMessageStatus, float]] = []

        async def put(n: int) -> None:
            started = trio.current_time()
            status = (await store.put_message(make_msg(b"%d" % n))).status
            answers.append((status, trio.current_time() - started))

        with trio.fail_after(DEADLINE_S):
            async with trio.open_nursery() as nursery:
                for n in range(200):
                    nursery.start_soon(put, n)
            await trio.sleep(BUSY_MS * 2 / 1000)  # the sweeper wakes with nothing to answer
    assert len(answers) == 200
    young_busy = [
        waited
        for status, waited in answers
        if status is not PutMessageStatus.PUT_OK and waited < BUSY_MS / 1000
    ]
    assert young_busy == [], "puts answered busy before the busy timeout"
    assert {status for status, _ in answers} <= {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.OS_PAGE_CACHE_BUSY,
    }
    stored = sum(1 for status, _ in answers if status is PutMessageStatus.PUT_OK)
    assert stored and store.topic_queue_table == {"T1-0": stored}
