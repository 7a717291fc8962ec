"""Broker admin requests: GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26) and
UPDATE_BROKER_CONFIG (25), answered as RocketMQ 4.9's `AdminBrokerProcessor` answers them.

The runtime info is the `KVTable` 4.9 fills, with the keys whose figures this broker really
has (`runtime_info`, `disk_figures`); keys of machinery it does not have (thread-pool queues
and their head wait times) or figures it does not keep (the longest put and get, latency
percentiles and the put time distribution, `dispatchMaxBuffer`) are left out rather than made
up. Store state is read on the event loop, the disk's statvfs in a thread. The configuration
is Java properties text, camelCase keys; an update changes only run-time keys and is
persisted (`broker.admin.runtime_config`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping

import structlog
import trio

from broker.admin import runtime_config
from broker.admin.state import Sample
from broker.processors import RequestContext
from broker.topic_config import SCHEDULE_TOPIC
from protocol.admin_topic import (
    GetBrokerConfigResponseHeader,
    KVTable,
    parse_properties,
    properties_text,
)
from protocol.codes import MQ_VERSION, ResponseCode
from protocol.command import RemotingCommand
from store.cleanup import disk_used_ratio
from store.config import MessageStoreConfig
from store.layout import SYSFLAG_POS, store_timestamp_pos
from store.message import BORNHOST_V6_FLAG
from store.message_store import DefaultMessageStore
from store.status import PutMessageStatus

log = structlog.get_logger()

VERSION_DESC = "V4_9_7"
JAVA_INT_MAX = 2**31 - 1
_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


def human_bytes(size: int) -> str:
    """`MixAll.humanReadableByteCount(size, false)`: "512 B", "1.5 KiB", "2.0 GiB"."""
    if size < 1024:
        return f"{size} B"
    exp = min(6, (size.bit_length() - 1) // 10)
    return f"{size / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def format_runtime(elapsed_ms: int) -> str:
    """StoreStatsService's `runtime`: "[ 0 days, 1 hours, 2 minutes, 3 seconds ]"."""
    seconds = elapsed_ms // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def _earliest_store_time(store: DefaultMessageStore) -> int:
    """Store time of the first message in the commit log; 0 when there is none."""
    consume = store.consume
    if consume is None or store.max_offset <= store.min_offset:
        return 0
    end = store_timestamp_pos(BORNHOST_V6_FLAG) + 8
    data = consume.read_bytes(store.min_offset, end)
    if data is None or len(data) < SYSFLAG_POS + 4:
        return 0
    position = store_timestamp_pos(int.from_bytes(data[SYSFLAG_POS : SYSFLAG_POS + 4], "big"))
    return int.from_bytes(data[position : position + 8], "big", signed=True)


def _store_info(
    store: DefaultMessageStore, stored_messages: int, schedule_offsets: Mapping[int, int]
) -> dict[str, str]:
    """As 4.9: `putMessageTimesTotal` counts stored messages (a batch counts each), the size
    total their stored bytes, the failures the put calls that stored nothing."""
    stats = store.stats
    times = stored_messages
    size = sum(n for status, n in stats.put_bytes_by_status.items() if status in _STORED)
    failed = sum(n for status, n in stats.put_count_by_status.items() if status not in _STORED)
    busy_since = store.writer.queue.busy_since
    lock_ms = int((trio.current_time() - busy_since) * 1000) if busy_since is not None else 0
    info = {
        "commitLogMinOffset": str(store.min_offset),
        "commitLogMaxOffset": str(store.max_offset),
        "putMessageTimesTotal": str(times),
        "putMessageSizeTotal": str(size),
        "putMessageFailedTimes": str(failed),
        "putMessageAverageSize": str(size / max(1, times)),
        "pageCacheLockTimeMills": str(lock_ms),
        "earliestMessageTimeStamp": str(_earliest_store_time(store)),
        "remainHowManyDataToFlush": human_bytes(max(0, store.written_offset - store.flushed_where)),
    }
    pool = store.pool
    if pool is None:
        info["remainTransientStoreBufferNumbs"] = str(JAVA_INT_MAX)  # 4.9's "no pool"
    else:
        info["remainTransientStoreBufferNumbs"] = str(pool.size - pool.allocated + len(pool.free))
        unsent = store.written_offset - store.mapped_file_queue.committed_where
        info["remainHowManyDataToCommit"] = human_bytes(max(0, unsent))
    consume = store.consume
    if consume is not None:
        behind = store.max_offset - consume.dispatched_offset
        info["dispatchBehindBytes"] = str(max(0, behind))
        for level, offset in sorted(schedule_offsets.items()):
            # 4.9's form: the level's next offset to deliver, its queue's max offset
            high = consume.max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            info[f"scheduleMessageOffset_{level}"] = f"{offset},{high}"
    return info


def disk_figures(config: MessageStoreConfig) -> dict[str, str]:
    """The disk ratios and the store directory's capacity (statvfs: call it in a thread)."""
    commit_log = config.store_path_commit_log
    ratio = disk_used_ratio(commit_log)
    usage = shutil.disk_usage(config.store_path_root_dir)
    # -1.0 before the first consume queue exists, as 4.9 answers for a missing path
    consume_queues = os.path.join(config.store_path_root_dir, "consumequeue")
    return {
        "commitLogDiskRatio": str(ratio),
        f"commitLogDiskRatio_{commit_log}": str(ratio),
        "consumeQueueDiskRatio": str(
            disk_used_ratio(consume_queues) if os.path.isdir(consume_queues) else -1.0
        ),
        "commitLogDirCapacity": (
            f"Total : {human_bytes(usage.total)}, Free : {human_bytes(usage.free)}."
        ),
    }


def _put_count(sample: Sample) -> int:
    return sample.puts


def runtime_info(ctx: RequestContext) -> dict[str, str]:
    """The KVTable of GET_BROKER_RUNTIME_INFO but its disk figures (`disk_figures`)."""
    broker = ctx.broker
    stats = broker.admin.stats
    now_ms = int(time.time() * 1000)
    puts_now, gets_now = stats.puts(), stats.transferred
    info = {
        "brokerVersionDesc": VERSION_DESC,
        "brokerVersion": str(MQ_VERSION),
        "bootTimestamp": str(stats.boot_ms),
        "runtime": format_runtime(now_ms - stats.boot_ms),
        "startAcceptSendRequestTimeStamp": str(broker.config.start_accept_send_request_time_stamp),
        "msgPutTotalYesterdayMorning": str(stats.yesterday_morning[0]),
        "msgPutTotalTodayMorning": str(stats.today_morning[0]),
        "msgPutTotalTodayNow": str(puts_now),
        "msgGetTotalYesterdayMorning": str(stats.yesterday_morning[1]),
        "msgGetTotalTodayMorning": str(stats.today_morning[1]),
        "msgGetTotalTodayNow": str(gets_now),
        "putTps": stats.tps(_put_count),
        "getFoundTps": stats.tps(lambda s: s.get_found),
        "getMissTps": stats.tps(lambda s: s.get_miss),
        "getTotalTps": stats.tps(lambda s: s.get_found + s.get_miss),
        "getTransferedTps": stats.tps(lambda s: s.transferred),
    }
    if isinstance(broker.store, DefaultMessageStore):
        info.update(_store_info(broker.store, puts_now, broker.admin.schedule_offsets()))
    return info


class GetBrokerRuntimeInfoProcessor:
    """GET_BROKER_RUNTIME_INFO (28)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        info = runtime_info(ctx)
        store = ctx.broker.config.store
        info.update(await trio.to_thread.run_sync(disk_figures, store))  # statvfs: off the loop
        return request.make_response(ResponseCode.SUCCESS, body=KVTable(info).to_json())


class GetBrokerConfigProcessor:
    """GET_BROKER_CONFIG (26): every key as properties text; `version` header."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        body = properties_text(runtime_config.config_properties(ctx.broker.config))
        version = json.dumps(ctx.broker.admin.config_version.to_json(), separators=(",", ":"))
        ext = GetBrokerConfigResponseHeader(version).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=ext, body=body)


class UpdateBrokerConfigProcessor:
    """UPDATE_BROKER_CONFIG (25): run-time keys only, all or nothing, persisted first."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        changes = parse_properties(request.body)
        broker = ctx.broker
        async with broker.admin.config_lock:
            config, by_key = runtime_config.updated(broker.config, changes)
            if not by_key:
                return request.make_response(ResponseCode.SUCCESS)
            version = broker.admin.config_version
            version.next()
            try:
                await runtime_config.save(runtime_config.runtime_file(config), by_key, version)
            except OSError as exc:
                log.error("config_update_not_saved", error=str(exc), keys=sorted(by_key))
                return request.make_response(
                    ResponseCode.SYSTEM_ERROR, f"updateBrokerConfig: not saved, not applied: {exc}"
                )
            broker.config = config
        log.info("config_updated", changes=by_key, remote=ctx.remote_text)
        return request.make_response(ResponseCode.SUCCESS)
