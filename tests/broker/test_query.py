"""QUERY_MESSAGE and VIEW_MESSAGE_BY_ID against real brokers: keys and unique keys found, after
a clean restart and after kill -9, maxNum and its cap, colliding hashes, offsets checked."""

from __future__ import annotations

import pathlib

import trio

from broker.topic_config import TRANS_HALF_TOPIC
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.msgid import decode_offset_msg_id
from protocol.properties import decode_properties
from rmq_client.producer import Message, Producer, SendResult, open_producer
from rmq_client.query import QueryAnswer, query_by_key, view_by_offset
from rmq_client.transaction import TransactionState, open_transaction_producer
from store.decode import CommitLogRecord
from tests.conftest import make_config, start_broker
from tests.daemon import Daemon

#: small index files, so a few dozen keys fill several
INDEX = {"max_hash_slot_num": 16, "max_index_num": 20}
INDEX_ENV = {
    "RMQ_MAX_HASH_SLOT_NUM": "16",
    "RMQ_MAX_INDEX_NUM": "20",
    "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(1 << 20),  # a quick recovery after kill -9
}


async def settled(conn: Producer, topic: str, key: str, count: int) -> QueryAnswer:
    """The index follows dispatch: ask until `count` records of `key` are found."""
    with trio.fail_after(20):
        while True:
            answer = await query_by_key(conn, topic, key, max_num=64)
            if len(answer.records) >= count:
                return answer
            await trio.sleep(0.05)


def keys_of(answer: QueryAnswer) -> list[str]:
    return [decode_properties(r.properties).get("KEYS", "") for r in answer.records]


async def test_keys_unique_keys_and_offset_ids_survive_a_clean_restart(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", **INDEX)
    broker = await start_broker(nursery, config)
    async with open_producer("127.0.0.1", broker.port) as conn:
        sent = [
            await conn.send(Message("QT", b"body-%d" % n, keys=[f"order-{n}", "common"]))
            for n in range(12)
        ]
        answer = await settled(conn, "QT", "common", 12)
        assert [r.body for r in answer.records] == [b"body-%d" % n for n in range(12)]
        assert answer.index_last_update_phyoffset > 0 and answer.index_last_update_timestamp > 0
        assert keys_of(await query_by_key(conn, "QT", "order-3")) == ["order-3 common"]
        unique = await query_by_key(conn, "QT", sent[5].msg_id, unique=True)
        assert [r.body for r in unique.records] == [b"body-5"]
        assert (await query_by_key(conn, "QT", "order-99")).records == []
        assert (await query_by_key(conn, "Other", "common")).records == []
    await broker.stop()
    broker = await start_broker(nursery, config)
    async with open_producer("127.0.0.1", broker.port) as conn:
        answer = await settled(conn, "QT", "common", 12)
        assert len(answer.records) == 12
        _, _, offset = decode_offset_msg_id(sent[7].offset_msg_id)
        record = await view_by_offset(conn, offset)
        assert record is not None and record.body == b"body-7"
        assert await view_by_offset(conn, offset + 1) is None  # no record starts there
        assert await view_by_offset(conn, 1 << 40) is None
    await broker.stop()


async def test_a_query_answers_not_found_with_the_index_position(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store", **INDEX))
    async with open_producer("127.0.0.1", broker.port) as conn:
        await conn.send(Message("QT", b"x", keys="present"))
        await settled(conn, "QT", "present", 1)
        ext = {
            "topic": "QT",
            "key": "absent",
            "maxNum": "32",
            "beginTimestamp": "0",
            "endTimestamp": str(1 << 62),
        }
        response = await conn.request(RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext))
        assert response.code == ResponseCode.QUERY_NOT_FOUND
        assert response.remark == "can not find message, maybe time range not correct"
        assert int(response.ext_fields["indexLastUpdatePhyoffset"]) == 0  # the only record's
        assert int(response.ext_fields["indexLastUpdateTimestamp"]) > 0
        # a time range that ends before the message was stored finds nothing either
        early = await query_by_key(conn, "QT", "present", end=1000)
        assert early.records == []
        ext["maxNum"] = "-1"
        refused = await conn.request(RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext))
        assert refused.code != ResponseCode.SUCCESS
    await broker.stop()


async def test_max_num_is_respected_and_capped_at_64(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store", **INDEX))
    async with open_producer("127.0.0.1", broker.port) as conn:
        sent = [await conn.send(Message("Many", b"%d" % n, keys="one-key")) for n in range(70)]
        await settled(conn, "Many", sent[-1].msg_id, 1)  # indexed in log order: all of them are
        answer = await query_by_key(conn, "Many", "one-key", max_num=64)
        assert len(answer.records) == 64  # 4.9's maxMsgsNumBatch
        assert [r.body for r in answer.records] == [b"%d" % n for n in range(6, 70)]  # newest
        five = await query_by_key(conn, "Many", "one-key", max_num=5)
        assert [r.body for r in five.records] == [b"%d" % n for n in range(65, 70)]
        offsets = [r.physical_offset for r in answer.records]
        assert offsets == sorted(offsets)
    await broker.stop()


async def test_keys_with_one_java_hash_do_not_answer_for_each_other(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store", **INDEX))
    async with open_producer("127.0.0.1", broker.port) as conn:
        await conn.send(Message("Hash", b"aa", keys="Aa"))
        await conn.send(Message("Hash", b"bb", keys="BB"))
        aa = await settled(conn, "Hash", "Aa", 1)
        bb = await settled(conn, "Hash", "BB", 1)
        assert [r.body for r in aa.records] == [b"aa"]
        assert [r.body for r in bb.records] == [b"bb"]
    await broker.stop()


async def test_with_the_index_off_nothing_is_found(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", message_index_enable=False)
    broker = await start_broker(nursery, config)
    async with open_producer("127.0.0.1", broker.port) as conn:
        result = await conn.send(Message("Off", b"x", keys="k"))
        _, _, offset = decode_offset_msg_id(result.offset_msg_id)
        await trio.sleep(0.3)
        assert (await query_by_key(conn, "Off", "k")).records == []
        record = await view_by_offset(conn, offset)  # the offset id still works
        assert record is not None and record.body == b"x"
    await broker.stop()
    assert not (tmp_path / "store" / "index").exists() or not any(
        (tmp_path / "store" / "index").iterdir()
    )


async def test_keys_are_found_after_kill_9(tmp_path: pathlib.Path) -> None:
    """Two brokers killed in turn, each after its keys were found; the third finds them all."""
    store = tmp_path / "store"
    sent: list[tuple[bytes, str]] = []
    for round_ in range(2):
        daemon = Daemon(store, env=INDEX_ENV)
        try:
            async with open_producer("127.0.0.1", daemon.port) as conn:
                for n in range(30):
                    body = b"r%d-%d" % (round_, n)
                    result = await conn.send(Message("Crash", body, keys=["crash", f"n{n}"]))
                    sent.append((body, result.msg_id))
                answer = await settled(conn, "Crash", "crash", len(sent))
                assert [r.body for r in answer.records] == [body for body, _ in sent]
                for body, msg_id in sent[:: len(sent) // 5]:
                    found = await query_by_key(conn, "Crash", msg_id, unique=True)
                    assert [r.body for r in found.records] == [body]
        finally:
            daemon.kill()
    daemon = Daemon(store, env=INDEX_ENV)
    try:
        async with open_producer("127.0.0.1", daemon.port) as conn:
            answer = await settled(conn, "Crash", "crash", len(sent))
            assert [r.body for r in answer.records] == [body for body, _ in sent]
    finally:
        daemon.stop()


async def test_a_committed_transaction_is_found_in_its_topic_and_a_rolled_back_one_is_not(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store", **INDEX))

    async def never_checked(_half: CommitLogRecord) -> TransactionState:
        return TransactionState.UNKNOWN

    async def commit(_message: Message, _sent: SendResult) -> TransactionState:
        return TransactionState.COMMIT

    async def rollback(_message: Message, _sent: SendResult) -> TransactionState:
        return TransactionState.ROLLBACK

    async with open_transaction_producer(
        "127.0.0.1", broker.port, "tx-query", never_checked
    ) as producer:
        await producer.send_in_transaction(Message("TxQ", b"kept", keys="tx-kept"), commit)
        await producer.send_in_transaction(Message("TxQ", b"gone", keys="tx-gone"), rollback)
    async with open_producer("127.0.0.1", broker.port) as conn:
        kept = await settled(conn, "TxQ", "tx-kept", 1)
        assert [r.body for r in kept.records] == [b"kept"]
        half = await settled(conn, TRANS_HALF_TOPIC, "tx-gone", 1)  # the half, as 4.9 indexes it
        assert [r.body for r in half.records] == [b"gone"]
        assert (await query_by_key(conn, "TxQ", "tx-gone")).records == []
    await broker.stop()


def mapped(pid: int, name: str) -> bool:
    return name in pathlib.Path(f"/proc/{pid}/maps").read_text()


async def test_a_broker_seeing_a_few_messages_at_a_time_indexes_them_without_numpy(
    tmp_path: pathlib.Path,
) -> None:
    """numpy (about 11 MiB of RSS) is loaded for runs of many records only: a broker at rest,
    or taking a message now and then, finds every key without it."""
    daemon = Daemon(tmp_path / "store", env=INDEX_ENV)
    try:
        async with open_producer("127.0.0.1", daemon.port) as conn:
            for n in range(5):
                await conn.send(Message("QT", b"body-%d" % n, keys=[f"order-{n}", "common"]))
                await settled(conn, "QT", f"order-{n}", 1)
            answer = await settled(conn, "QT", "common", 5)
        assert [r.body for r in answer.records] == [b"body-%d" % n for n in range(5)]
        assert not mapped(daemon.process.pid, "numpy")
        assert mapped(daemon.process.pid, "libpython") or mapped(daemon.process.pid, "python3")
    finally:
        daemon.stop()
