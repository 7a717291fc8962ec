"""`run_index`: the task that keeps the message index (`IndexService`) behind the dispatcher.

Builds in a worker thread (page faults on the index files and the reading of the log stay off
the event loop) and saves each second. With a backlog (a start, a catch-up) batches follow one
another at once. Once caught up it lets `GATHER_BYTES` of the log gather (at most `GATHER_S`)
before the next, so that under load a batch indexes hundreds of records: a run costs about
what a few dozen records cost, whatever its length, on top of a few microseconds a record. A
record is found by its keys at most about `GATHER_S` after it was dispatched; an idle index
builds at the next dispatch. An error (a full disk, damage in the log) stops indexing for a
second, not the store, with one event per failing spell.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

import structlog
import trio

from store.decode import RecordFormatError
from store.index.service import IndexService

log = structlog.get_logger()
SAVE_INTERVAL_S: Final = 1.0
IDLE_WAIT_S: Final = 0.1
#: a caught-up index lets this much of the log gather before its next batch, or waits this long
GATHER_BYTES: Final = 1 << 20
GATHER_S: Final = 0.2
_GATHER_STEP_S: Final = 0.02
#: what stops indexing for a while, not the store: a full disk, damage in the log or the files
_BUILD_ERRORS: Final = (OSError, ValueError, struct.error, RecordFormatError)


async def run_index(
    index: IndexService,
    readable_end: Callable[[], int],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Index up to `readable_end()` (dispatched) until cancelled; then index what is left and
    save a last time."""
    task_status.started()
    next_save = trio.current_time() + SAVE_INTERVAL_S
    failing = False
    try:
        while True:
            moved = worked = False
            end = readable_end()
            try:
                if index.indexed_offset < end or index.release_pending:
                    moved = await trio.to_thread.run_sync(index.build_batch, end)
                    worked = True
                if trio.current_time() >= next_save:
                    next_save = trio.current_time() + SAVE_INTERVAL_S
                    await trio.to_thread.run_sync(index.save)
                    worked = True
                if worked and failing:  # a round that tried nothing does not end a spell
                    log.info("index_build_recovered", offset=index.indexed_offset)
                    failing = False
            except _BUILD_ERRORS as exc:
                if not failing:
                    log.error("index_build_failed", error=str(exc), offset=index.indexed_offset)
                failing = True
                await trio.sleep(1.0)
                continue
            except Exception:  # a fault of ours: the index is secondary, the broker stays up
                if not failing:
                    log.exception("index_build_fault", offset=index.indexed_offset)
                index.vectorised = False  # the record-by-record path writes the same bytes
                failing = True
                await trio.sleep(1.0)
                continue
            if moved and index.indexed_offset < end:
                await trio.lowlevel.checkpoint()  # a full batch: the next one at once
            elif moved:
                await _gather(index, readable_end)
            else:
                await index.wait_dispatched(IDLE_WAIT_S)
    finally:
        with trio.CancelScope(shield=True):
            try:
                while await trio.to_thread.run_sync(index.build_batch, readable_end()):
                    pass
                await trio.to_thread.run_sync(index.save)
            except _BUILD_ERRORS as exc:
                log.error("index_close_failed", error=str(exc))
            except Exception:  # a fault of ours: the rest of the store still closes cleanly
                log.exception("index_close_fault", offset=index.indexed_offset)


async def _gather(index: IndexService, readable_end: Callable[[], int]) -> None:
    """Until `GATHER_BYTES` of the log wait to be indexed, at most `GATHER_S`."""
    deadline = trio.current_time() + GATHER_S
    while readable_end() - index.indexed_offset < GATHER_BYTES:
        left = deadline - trio.current_time()
        if left <= 0:
            return
        await trio.sleep(min(left, _GATHER_STEP_S))
