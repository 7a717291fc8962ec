"""PULL_MESSAGE and the consumer calls against a real broker over loopback: bodies and tags read
back, tag filtering, out-of-range offsets, long-poll wakeup, committed offsets across a restart,
the group's client list, and refusals with their codes."""

from __future__ import annotations

import itertools
import json
import pathlib
import time

import pytest
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import FLAG_SUSPEND, PullMessageRequestHeader
from protocol.frame import encode_frame
from protocol.properties import decode_properties
from protocol.route import ConsumerData, HeartbeatData, SubscriptionData
from rmq_client.producer import Message, SendError, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from store.decode import CommitLogRecord
from tests.conftest import RunningBroker, make_config, start_broker
from tests.store.conftest import wait_until

GROUP = "pull-group"


async def send_all(port: int, topic: str, messages: list[Message]) -> None:
    async with open_producer("127.0.0.1", port) as producer:
        for message in messages:
            await producer.send(message)


async def test_pull_reads_back_bodies_tags_and_keys_in_order(broker: RunningBroker) -> None:
    sent = [
        Message("PullT", b"body-%d" % i, tags="AB"[i % 2], keys=f"k{i}", queue_id=0)
        for i in range(40)
    ]
    await send_all(broker.port, "PullT", sent)
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("PullT")
        got: list[CommitLogRecord] = []
        offset = 0
        with trio.fail_after(10):
            while len(got) < 40:
                result = await consumer.pull("PullT", 0, offset, max_nums=16)
                assert result.found, result
                got.extend(result.records)
                offset = result.next_begin_offset
        assert [r.body for r in got] == [m.body for m in sent]
        assert [r.queue_offset for r in got] == list(range(40))
        assert [decode_properties(r.properties)["TAGS"] for r in got] == [m.tags for m in sent]
        assert [decode_properties(r.properties)["KEYS"] for r in got] == [m.keys for m in sent]
        assert result.max_offset == 40 and result.min_offset == 0
        nothing = await consumer.pull("PullT", 0, 40)
        assert nothing.code == ResponseCode.PULL_NOT_FOUND and nothing.next_begin_offset == 40


async def test_tag_filter_and_offsets_out_of_range(broker: RunningBroker) -> None:
    await send_all(
        broker.port,
        "Tagged",
        [Message("Tagged", b"%d" % i, tags=("red", "blue")[i % 2], queue_id=1) for i in range(10)],
    )
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Tagged", "blue")
        blue = await consumer.pull("Tagged", 1, 0, expression="blue")
        assert [r.body for r in blue.records] == [b"1", b"3", b"5", b"7", b"9"]
        # the group's subscription from the heartbeat applies when the pull carries none
        by_group = await consumer.pull("Tagged", 1, 0)
        assert [r.body for r in by_group.records] == [r.body for r in blue.records]
        none = await consumer.pull("Tagged", 1, 0, expression="green")
        assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.next_begin_offset == 10
        beyond = await consumer.pull("Tagged", 1, 500, expression="*")
        # past the end of a queue that still starts at 0: back to 0, as upstream corrects it
        assert beyond.code == ResponseCode.PULL_OFFSET_MOVED and beyond.next_begin_offset == 0
        assert await consumer.max_offset("Tagged", 1) == 10
        assert await consumer.min_offset("Tagged", 1) == 0
        empty_queue = await consumer.pull("Tagged", 2, 7, expression="*")
        assert empty_queue.code == ResponseCode.PULL_OFFSET_MOVED


async def held(broker: RunningBroker, count: int = 1) -> None:
    """Return once `count` pulls are held by the broker."""
    waiters = broker.server.broker.pull_waiters
    await wait_until(lambda: waiters.waiting == count, 20)


async def test_a_suspended_pull_is_answered_when_a_message_arrives(
    broker: RunningBroker,
) -> None:
    await send_all(broker.port, "Poll", [Message("Poll", b"first", queue_id=0)])
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Poll")
        assert (await consumer.pull("Poll", 0, 0)).found
        answers: list[list[bytes | None]] = []

        async def held_pull() -> None:
            result = await consumer.pull("Poll", 0, 1, suspend_ms=120_000)
            answers.append([r.body for r in result.records])

        # The hold is 120 s: answered within the generous 30 s, and with the message, the pull
        # was answered by the arrival, not by its timeout (which answers PULL_NOT_FOUND).
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(held_pull)
                await held(broker)
                assert not answers
                await send_all(broker.port, "Poll", [Message("Poll", b"late", queue_id=0)])
        assert answers == [[b"late"]]


async def test_a_suspended_pull_times_out_with_not_found(broker: RunningBroker) -> None:
    await send_all(broker.port, "Quiet", [Message("Quiet", b"only", queue_id=0)])
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Quiet")
        started = trio.current_time()
        with trio.fail_after(30):
            result = await consumer.pull("Quiet", 0, 1, suspend_ms=600)
        assert result.code == ResponseCode.PULL_NOT_FOUND
        assert trio.current_time() - started >= 0.5  # held, not answered at once


async def test_a_pull_without_the_suspend_flag_is_never_held(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As 4.9 answers DefaultMQPullConsumer.pull: PULL_NOT_FOUND at once, no hold at all (a
    client reading eight empty queues in turn would otherwise wait for each)."""
    await send_all(broker.port, "NoHold", [Message("NoHold", b"only", queue_id=0)])
    waits: list[tuple[str, int, float]] = []
    waiters = broker.server.broker.pull_waiters
    real_wait = waiters.wait

    async def recorded(topic: str, queue_id: int, timeout_s: float) -> bool:
        waits.append((topic, queue_id, timeout_s))
        return await real_wait(topic, queue_id, timeout_s)

    monkeypatch.setattr(waiters, "wait", recorded)
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("NoHold")
        for queue_id in range(4):
            result = await consumer.pull("NoHold", queue_id, 1 if queue_id == 0 else 0)
            assert result.code == ResponseCode.PULL_NOT_FOUND
        assert waits == []
        held = await consumer.pull("NoHold", 0, 1, suspend_ms=300)
        assert held.code == ResponseCode.PULL_NOT_FOUND
        assert waits == [("NoHold", 0, 0.3)]


async def test_a_shutdown_answers_held_pulls_at_once(broker: RunningBroker) -> None:
    await send_all(broker.port, "Held", [Message("Held", b"only", queue_id=0)])
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Held")
        codes: list[int] = []

        async def held_pull() -> None:
            codes.append((await consumer.pull("Held", 0, 1, suspend_ms=120_000)).code)

        # Past the broker's shutdown_timeout_s the connection would be cut: no answer at all.
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(held_pull)
                await held(broker)
                broker.server.shutdown()
                await broker.done.wait()
        assert codes == [ResponseCode.PULL_NOT_FOUND]


async def test_committed_offsets_survive_a_restart(tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path / "store", flush_consumer_offset_interval_ms=60_000)
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        await send_all(broker.port, "Durable", [Message("Durable", b"x", queue_id=0)] * 5)
        async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
            await consumer.subscribe("Durable")
            assert await consumer.committed("Durable", 0) == 0  # a new group starts at 0
            await consumer.commit("Durable", 0, 3)
            # the commit offset a pull carries is stored too
            await consumer.pull("Durable", 3, 0, commit_offset=2)
            assert await consumer.committed("Durable", 3) == 2
        await broker.stop()  # the table is written on the way out, not by the 60 s timer
        saved = json.loads((tmp_path / "store" / "config" / "consumerOffset.json").read_text())
        assert saved["offsetTable"][f"Durable@{GROUP}"] == {"0": 3, "3": 2}
        broker = await start_broker(nursery, config)
        async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
            assert await consumer.committed("Durable", 0) == 3
            rest = await consumer.pull("Durable", 0, 3, expression="*")
            assert [r.queue_offset for r in rest.records] == [3, 4]
        await broker.stop()


async def test_a_pull_never_moves_a_committed_offset_back(broker: RunningBroker) -> None:
    await send_all(broker.port, "Ahead", [Message("Ahead", b"x", queue_id=0)] * 3)
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Ahead")
        await consumer.commit("Ahead", 0, 3)
        await consumer.pull("Ahead", 0, 1, commit_offset=1)  # a late pull, older commit
        assert await consumer.committed("Ahead", 0) == 3
        await consumer.commit("Ahead", 0, 1)  # an explicit update may reset it
        assert await consumer.committed("Ahead", 0) == 1


async def test_consumer_list_follows_heartbeats_and_unregister(broker: RunningBroker) -> None:
    async with (
        open_pull_consumer("127.0.0.1", broker.port, GROUP, client_id="c1@1") as first,
        open_pull_consumer("127.0.0.1", broker.port, GROUP, client_id="c2@2") as second,
    ):
        await first.subscribe("Members")
        await second.subscribe("Members")
        assert await first.consumer_ids() == ["c1@1", "c2@2"]
        # the group's retry topic exists once its consumers have been seen
        assert broker.server.broker.topics.find(f"%RETRY%{GROUP}") is not None
        await second.connection.request(
            RemotingCommand.request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": "c2@2", "consumerGroup": GROUP}
            )
        )
        assert await first.consumer_ids() == ["c1@1"]


async def test_search_offset_by_timestamp(broker: RunningBroker) -> None:
    await send_all(broker.port, "Timed", [Message("Timed", b"a", queue_id=0)] * 3)
    await trio.sleep(0.05)
    middle = int(time.time() * 1000)
    await trio.sleep(0.05)
    await send_all(broker.port, "Timed", [Message("Timed", b"b", queue_id=0)] * 2)
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        assert await consumer.offset_by_time("Timed", 0, 0) == 0
        assert await consumer.offset_by_time("Timed", 0, middle) == 3
        assert await consumer.offset_by_time("Timed", 0, middle + 3_600_000) == 5


@pytest.mark.parametrize(
    ("topic", "queue_id", "group", "code"),
    [
        ("NoSuchTopic", 0, GROUP, ResponseCode.TOPIC_NOT_EXIST),
        ("Known", 99, GROUP, ResponseCode.SYSTEM_ERROR),
        ("Known", 0, "never-seen-group", ResponseCode.SUBSCRIPTION_NOT_EXIST),
    ],
)
async def test_bad_pulls_are_refused_with_their_code(
    broker: RunningBroker, topic: str, queue_id: int, group: str, code: int
) -> None:
    await send_all(broker.port, "Known", [Message("Known", b"k", queue_id=0)])
    async with open_pull_consumer("127.0.0.1", broker.port, group) as consumer:
        if group == GROUP:
            await consumer.subscribe(topic)
        else:  # the group exists (auto-created) but has no subscription for the topic
            await consumer.subscribe("Other")
        with pytest.raises(SendError) as refused:
            await consumer.pull(topic, queue_id, 0)
        assert refused.value.code == code and refused.value.remark


async def test_a_client_whose_connection_closes_leaves_its_group_while_its_pull_is_held(
    broker: RunningBroker,
) -> None:
    """A consumer that dies with a pull held (long polling) is gone from its group as soon
    as its connection closes, not when the hold ends: its group rebalances its queues now."""
    await send_all(broker.port, "Gone", [Message("Gone", b"only", queue_id=0)])
    gone = await trio.open_tcp_stream("127.0.0.1", broker.port)
    consumer = ConsumerData(
        GROUP,
        "CONSUME_ACTIVELY",
        "CLUSTERING",
        "CONSUME_FROM_FIRST_OFFSET",
        (SubscriptionData("Gone", "*"),),
    )
    heartbeat = HeartbeatData("gone@1", (), (consumer,)).to_json()
    await gone.send_all(
        encode_frame(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body=heartbeat))
    )
    with trio.fail_after(30):
        assert await gone.receive_some()  # the heartbeat's answer: the group is known
    pull = PullMessageRequestHeader(
        GROUP, "Gone", 0, 1, 32, FLAG_SUSPEND, 0, 120_000, 0, None, None
    )
    await gone.send_all(
        encode_frame(RemotingCommand.request(RequestCode.PULL_MESSAGE, pull.to_ext_fields()))
    )
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP, client_id="stays@2") as stays:
        await stays.subscribe("Gone")
        await held(broker)  # the 120 s hold
        assert await stays.consumer_ids() == ["gone@1", "stays@2"]
        await gone.aclose()
        with trio.fail_after(30):  # a quarter of the hold
            members = await stays.consumer_ids()
            for _ in itertools.count():
                if members == ["stays@2"]:
                    break
                await trio.sleep(0.05)
                members = await stays.consumer_ids()
        assert broker.server.broker.pull_waiters.waiting == 1  # still held: not what freed it
