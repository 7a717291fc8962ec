"""The send path end to end: client stub -> real sockets -> broker -> real store -> records on disk.

Each test drives a broker on 127.0.0.1 port 0 (SYNC_FLUSH, so an acknowledged message is already
readable by `CommitLogReader`) and checks the response code and remark the spec gives, then the
records the store holds.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import AsyncIterator

import pytest
import trio

from broker.config import BrokerConfig
from broker.topic_config import TopicConfig
from protocol.batch import BatchEntry, encode_batch_body
from protocol.codes import RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2
from protocol.properties import decode_properties, encode_properties
from protocol.route import ConsumerData, HeartbeatData
from rmq_client.producer import Message, Producer, SendError, SendStatus, open_producer
from store.decode import CommitLogRecord
from store.message import java_string_hash
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from tests.conftest import RunningBroker, make_config, start_broker
from tests.store.conftest import wait_until


def records(config: BrokerConfig) -> list[CommitLogRecord]:
    with CommitLogReader(config.store.store_path_root_dir) as reader:
        return list(reader.iter_records(reader.min_offset))


@pytest.fixture
def broker_config(tmp_path: pathlib.Path) -> BrokerConfig:
    return make_config(tmp_path / "store", flush_disk_type="SYNC_FLUSH", max_message_size=64 * 1024)


def v1_header(topic: str = "TopicA", **changes: object) -> dict[str, str]:
    fields: dict[str, object] = {
        "producer_group": "pg",
        "topic": topic,
        "default_topic": "TBW102",
        "default_topic_queue_nums": 4,
        "queue_id": 0,
        "sys_flag": 0,
        "born_timestamp": 1_700_000_000_000,
        "flag": 0,
        "properties": encode_properties({"TAGS": "TagA", "WAIT": "true", "color": "blue"}),
    }
    fields.update(changes)
    return SendMessageRequestHeader(**fields).to_ext_fields()  # type: ignore[arg-type]


async def send_raw(
    producer: Producer,
    ext_fields: dict[str, str],
    body: bytes | None = b"body",
    code: int = RequestCode.SEND_MESSAGE,
    serialize_type: SerializeType = SerializeType.JSON,
) -> RemotingCommand:
    command = RemotingCommand.request(code, ext_fields, body, serialize_type=serialize_type)
    return await producer.request(command)


async def test_single_send_is_stored_as_the_spec_says(
    producer: Producer, broker: RunningBroker
) -> None:
    response = await send_raw(producer, v1_header())
    assert response.code == ResponseCode.SUCCESS
    assert response.remark is None
    ext = response.ext_fields
    assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
    assert (ext["queueId"], ext["queueOffset"]) == ("0", "0")
    [record] = records(broker.config)
    assert ext["msgId"] == f"7F000001{broker.port:08X}{record.physical_offset:016X}"
    assert record.topic == "TopicA" and record.body == b"body"
    assert record.born_host[0] == "127.0.0.1"
    assert record.store_host == ("127.0.0.1", broker.port)
    props = decode_properties(record.properties)
    assert props == {"TAGS": "TagA", "color": "blue", "CLUSTER": "DefaultCluster"}  # WAIT gone
    assert record.born_timestamp == 1_700_000_000_000
    assert record.crc_ok


async def test_v2_binary_header_is_answered_in_binary(producer: Producer) -> None:
    header = SendMessageRequestHeaderV2.from_v1(
        SendMessageRequestHeader.from_ext_fields(v1_header(queue_id=-1))
    )
    response = await send_raw(
        producer,
        header.to_ext_fields(),
        code=RequestCode.SEND_MESSAGE_V2,
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert response.code == ResponseCode.SUCCESS
    assert response.serialize_type is SerializeType.ROCKETMQ
    assert 0 <= int(response.ext_fields["queueId"]) < 4  # queueId < 0: a random writable queue


async def test_cpp_style_batch_flag_splits_the_body_into_records(
    producer: Producer, broker: RunningBroker
) -> None:
    entries = [
        BatchEntry(i, b"x" * (10 + i), encode_properties({"KEYS": f"k{i}", "TAGS": "T"}) + "\x02")
        for i in range(3)
    ]
    header = v1_header(batch=True, properties="WAIT\x01true\x02")
    header["batch"] = "1"  # the C++ client's spelling of true
    response = await send_raw(producer, header, encode_batch_body(entries))
    assert response.code == ResponseCode.SUCCESS, response.remark
    ids = response.ext_fields["msgId"].split(",")
    stored = records(broker.config)
    assert [r.queue_offset for r in stored] == [0, 1, 2]
    assert ids == [f"7F000001{broker.port:08X}{r.physical_offset:016X}" for r in stored]
    for i, record in enumerate(stored):
        assert record.flag == i and record.body == b"x" * (10 + i)
        assert decode_properties(record.properties) == {
            "KEYS": f"k{i}",
            "TAGS": "T",
            "WAIT": "true",
            "CLUSTER": "DefaultCluster",
        }


async def test_client_stub_batch_and_oneway(producer: Producer, broker: RunningBroker) -> None:
    result = await producer.send_batch([Message("Batched", b"a"), Message("Batched", b"b")])
    assert result.status is SendStatus.SEND_OK
    assert len(result.offset_msg_id.split(",")) == 2 == len(result.msg_id.split(","))
    await producer.send_oneway(Message("Oneway", b"quiet"))
    await producer.send(Message("Oneway", b"loud"))
    # Requests on one connection run concurrently: the oneway one may land after the other.
    with trio.fail_after(5):
        while len(stored := records(broker.config)) < 4:  # noqa: ASYNC110 (polls the files)
            await trio.sleep(0.01)
    assert [r.topic for r in stored] == ["Batched", "Batched", "Oneway", "Oneway"]
    assert {r.body for r in stored[2:]} == {b"quiet", b"loud"}


@pytest.mark.parametrize(
    ("topic", "code", "remark"),
    [
        ("T" * 128, 1, "The specified topic is longer than topic max length."),
        (" ", 1, "The specified topic is blank."),
        (
            "bad topic!",
            1,
            "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        ),
        ("SCHEDULE_TOPIC_XXXX", 16, "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."),
        (
            "RMQ_SYS_TRANS_HALF_TOPIC",
            16,
            "Sending message to topic[RMQ_SYS_TRANS_HALF_TOPIC] is forbidden.",
        ),
    ],
)
async def test_topic_checks(producer: Producer, topic: str, code: int, remark: str) -> None:
    response = await send_raw(producer, v1_header(topic))
    assert (response.code, response.remark) == (code, remark)
    assert set(response.ext_fields) == {"MSG_REGION", "TRACE_ON"}


async def test_message_illegal_for_big_properties_and_body(
    producer: Producer, broker: RunningBroker
) -> None:
    illegal = (
        "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 65536B, msg properties length limit 32KB."
    )
    big = encode_properties({"p": "v" * 32768})
    response = await send_raw(producer, v1_header(properties=big))
    assert (response.code, response.remark) == (ResponseCode.MESSAGE_ILLEGAL, illegal)
    response = await send_raw(producer, v1_header(), body=b"b" * (64 * 1024 + 1))
    assert (response.code, response.remark) == (ResponseCode.MESSAGE_ILLEGAL, illegal)
    assert records(broker.config) == []
    response = await send_raw(producer, v1_header(), body=b"b" * (64 * 1024))
    assert response.code == ResponseCode.SUCCESS


async def test_queue_id_out_of_range(producer: Producer) -> None:
    response = await send_raw(producer, v1_header(queue_id=4))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None
    assert response.remark.startswith(
        "request queueId[4] is illegal, TopicConfig [topicName=TopicA, readQueueNums=4, "
    )
    assert " Producer: 127.0.0.1:" in response.remark


async def test_bad_header_fields_keep_the_connection(producer: Producer) -> None:
    header = v1_header()
    header["queueId"] = "zero"
    response = await send_raw(producer, header)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark is not None and "queueId" in response.remark
    del header["queueId"]
    response = await send_raw(producer, header)
    assert (response.code, response.remark) == (1, "the custom field queueId is null")
    assert (await send_raw(producer, v1_header())).code == ResponseCode.SUCCESS


async def test_transactional_half_and_delayed_messages_are_rewritten(
    producer: Producer, broker: RunningBroker
) -> None:
    half = encode_properties({"TRAN_MSG": "true", "PGROUP": "pg", "WAIT": "true"})
    assert (await send_raw(producer, v1_header(properties=half, sys_flag=4))).code == 0
    delayed = encode_properties({"DELAY": "99", "TAGS": "late"})
    response = await send_raw(producer, v1_header(properties=delayed, queue_id=3))
    assert (response.code, response.ext_fields["queueId"]) == (0, "3")  # the requested queue
    half_record, delay_record = records(broker.config)
    assert (half_record.topic, half_record.queue_id) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0)
    assert half_record.sys_flag & 0xC == 0
    props = decode_properties(half_record.properties)
    assert (props["REAL_TOPIC"], props["REAL_QID"], props["WAIT"]) == ("TopicA", "0", "true")
    assert (delay_record.topic, delay_record.queue_id) == ("SCHEDULE_TOPIC_XXXX", 17)
    props = decode_properties(delay_record.properties)
    assert (props["REAL_TOPIC"], props["REAL_QID"], props["DELAY"]) == ("TopicA", "3", "18")


async def test_retry_topics_need_a_group_and_go_to_the_dlq_past_the_limit(
    producer: Producer, broker: RunningBroker
) -> None:
    retry = "%RETRY%cg"
    groups = broker.server.broker.groups
    groups.auto_create = False  # auto_create_subscription_group = false
    response = await send_raw(producer, v1_header(retry, reconsume_times=1))
    assert response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert response.remark is not None and response.remark.startswith(
        "subscription group not exist, cg"
    )
    groups.auto_create = True
    heartbeat = HeartbeatData(
        "client@1",
        (),
        (ConsumerData("cg", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET"),),
    )
    command = RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat.to_json())
    assert (await producer.request(command)).code == ResponseCode.SUCCESS
    delayed = encode_properties({"DELAY": "3"})
    assert (await send_raw(producer, v1_header(retry, reconsume_times=2))).code == 0
    dead = v1_header(retry, reconsume_times=16, properties=delayed)
    assert (await send_raw(producer, dead)).code == 0
    retried, dlq = records(broker.config)
    assert (retried.topic, retried.reconsume_times) == (retry, 2)
    assert (dlq.topic, dlq.queue_id, dlq.reconsume_times) == ("%DLQ%cg", 0, 16)
    assert "DELAY" not in decode_properties(dlq.properties)
    root = pathlib.Path(broker.config.store.store_path_root_dir)
    assert '"%DLQ%cg"' in (root / "config" / "topics.json").read_text()
    assert '"cg"' in (root / "config" / "subscriptionGroup.json").read_text()


async def test_a_retry_send_for_an_unknown_group_creates_the_group(
    producer: Producer, broker: RunningBroker
) -> None:
    retry = "%RETRY%newgroup"
    response = await send_raw(producer, v1_header(retry, reconsume_times=1))
    assert response.code == ResponseCode.SUCCESS, response.remark
    (record,) = records(broker.config)
    assert (record.topic, record.reconsume_times) == (retry, 1)
    root = pathlib.Path(broker.config.store.store_path_root_dir)
    assert '"newgroup"' in (root / "config" / "subscriptionGroup.json").read_text()


async def test_what_a_refused_send_created_is_persisted(
    producer: Producer, broker: RunningBroker
) -> None:
    # A topic created before the queue id is found illegal (as RocketMQ creates it), and a
    # retry topic and its group created before the message is found illegal: both refused,
    # neither stored, and the tables on disk hold what memory holds.
    response = await send_raw(producer, v1_header("Fresh", queue_id=7))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert (response.remark or "").startswith("request queueId[7] is illegal")
    nul = encode_properties({"TAGS": "a\x00b"})
    response = await send_raw(producer, v1_header("%RETRY%fresh", properties=nul))
    assert response.code == ResponseCode.MESSAGE_ILLEGAL
    assert records(broker.config) == []
    root = pathlib.Path(broker.config.store.store_path_root_dir)
    topics = (root / "config" / "topics.json").read_text()
    assert '"Fresh"' in topics and '"%RETRY%fresh"' in topics
    assert '"fresh"' in (root / "config" / "subscriptionGroup.json").read_text()


async def test_compressed_bodies_are_stored_as_sent(
    producer: Producer, broker: RunningBroker
) -> None:
    import zlib

    body = zlib.compress(b"z" * 10000)
    assert (await send_raw(producer, v1_header(sys_flag=1), body)).code == 0
    [record] = records(broker.config)
    assert record.body == body and record.sys_flag & 1


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("é😀") == ((233 * 31 + 0xD83D) * 31 + 0xDE00)


@pytest.mark.parametrize(
    ("overrides", "code", "remark_start"),
    [
        ({"broker_role": "SLAVE"}, 14, "service not available now."),
        ({"reject_transaction_message": "true"}, 16, "the broker[127.0.0.1] sending transaction"),
        ({"auto_create_topic_enable": "false"}, 17, "topic[TopicA] not exist, apply first please!"),
    ],
)
async def test_refusals_by_configuration(
    tmp_path: pathlib.Path, overrides: dict[str, str], code: int, remark_start: str
) -> None:
    config = make_config(tmp_path / "store", **overrides)
    half = encode_properties({"TRAN_MSG": "true"})
    async with trio.open_nursery() as nursery:
        running = await start_broker(nursery, config)
        async with open_producer("127.0.0.1", running.port) as client:
            response = await send_raw(client, v1_header(properties=half))
            assert response.code == code
            assert response.remark is not None and response.remark.startswith(remark_start)
            with pytest.raises(SendError) as info:
                await client.send(Message("TopicA", b"x", properties={"TRAN_MSG": "true"}))
            assert info.value.code == code
        await running.stop()


async def test_a_shut_down_store_answers_service_not_available(
    producer: Producer, broker: RunningBroker
) -> None:
    store = broker.server.broker.store
    store.writer.queue.closed = True  # type: ignore[attr-defined]
    with pytest.raises(SendError) as info:
        await producer.send(Message("TopicA", b"x"))
    assert info.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert info.value.remark is not None and "[CL: " in info.value.remark
    store.writer.queue.closed = False  # type: ignore[attr-defined]


async def test_flood_past_the_writer_queue_gets_system_busy(tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path / "store", put_queue_capacity=2, max_inflight_per_connection=512)
    frames = [
        encode_frame(RemotingCommand.request(RequestCode.SEND_MESSAGE, v1_header(), b"f", opaque=i))
        for i in range(300)
    ]
    async with trio.open_nursery() as nursery:
        running = await start_broker(nursery, config)
        async with open_producer("127.0.0.1", running.port) as client:
            assert (await send_raw(client, v1_header())).code == 0  # topic created beforehand
        stream = await trio.open_tcp_stream("127.0.0.1", running.port)
        async with stream:
            await stream.send_all(b"".join(frames))  # one burst: all parsed in one read
            decoder = FrameDecoder()
            answers: list[RemotingCommand] = []
            with trio.fail_after(20):
                while len(answers) < 300:
                    answers.extend(decoder.feed(bytes(await stream.receive_some(1 << 16))))
        await running.stop()
    assert sorted(a.opaque for a in answers) == list(range(300))
    codes = [a.code for a in answers]
    assert set(codes) == {0, ResponseCode.SYSTEM_BUSY}
    assert {a.remark for a in answers if a.code == ResponseCode.SYSTEM_BUSY} == {
        "[OVERLOAD]system busy, start flow control for a while: the store's writer queue is "
        "full (2 puts waiting, put_queue_capacity)"
    }
    stored = records(config)
    assert len(stored) == 1 + codes.count(0)  # every SEND_OK is on disk, nothing else


@pytest.fixture
async def ipv6_broker(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> AsyncIterator[RunningBroker]:
    running = await start_broker(nursery, make_config(tmp_path / "v6", listen="[::1]:0"))
    yield running
    await running.stop()


async def test_ipv6_listener_and_hosts(ipv6_broker: RunningBroker) -> None:
    async with open_producer("::1", ipv6_broker.port) as client:
        result = await client.send(Message("Six", b"v6"))
    assert len(result.offset_msg_id) == 56  # IPv6 store host
    await ipv6_broker.stop()
    [record] = records(ipv6_broker.config)
    assert record.born_host[0] == "::1" and record.store_host == ("::1", ipv6_broker.port)
    assert record.sys_flag & 0x30 == 0x30


async def test_a_compressed_batch_body_is_inflated_and_split(
    producer: Producer, broker: RunningBroker
) -> None:
    import zlib

    entries = [BatchEntry(0, b"y" * 3000, encode_properties({"KEYS": f"z{i}"})) for i in range(2)]
    header = v1_header(batch=True, sys_flag=1, properties="")
    response = await send_raw(producer, header, zlib.compress(encode_batch_body(entries)))
    assert response.code == ResponseCode.SUCCESS, response.remark
    stored = records(broker.config)
    assert [r.body for r in stored] == [b"y" * 3000] * 2
    assert all(r.sys_flag & 1 == 0 for r in stored)


async def test_sends_wait_for_the_start_time(tmp_path: pathlib.Path) -> None:
    later = int((time.time() + 3600) * 1000)
    config = make_config(tmp_path / "store", start_accept_send_request_time_stamp=later)
    async with trio.open_nursery() as nursery:
        running = await start_broker(nursery, config)
        async with open_producer("127.0.0.1", running.port) as client:
            with pytest.raises(SendError) as info:
                await client.send(Message("TopicA", b"x"))
        await running.stop()
    assert info.value.code == ResponseCode.SYSTEM_ERROR
    assert info.value.remark is not None
    assert info.value.remark.startswith("broker unable to service, until 20")
    assert records(config) == []


async def test_a_read_only_broker_refuses_order_topics_and_announces_read_only(
    tmp_path: pathlib.Path,
) -> None:
    config = make_config(tmp_path / "store", broker_permission=4)
    async with trio.open_nursery() as nursery:
        running = await start_broker(nursery, config)
        topics = running.server.broker.topics
        topics.put(TopicConfig("Ordered", 4, 4, order=True))
        topics.put(TopicConfig("Plain", 4, 4))
        async with open_producer("127.0.0.1", running.port) as client:
            with pytest.raises(SendError) as info:
                await client.send(Message("Ordered", b"x"))
            # 4.9 refuses only order topics here; the read-only route keeps clients away
            assert (await client.send(Message("Plain", b"y"))).status is SendStatus.SEND_OK
            [queue] = (await client.get_route("Plain")).queue_datas
        await running.stop()
    assert info.value.code == ResponseCode.NO_PERMISSION
    assert info.value.remark == "the broker[127.0.0.1] sending message is forbidden"
    assert queue.perm == 4
    assert [r.topic for r in records(config)] == ["Plain"]


async def test_a_batch_is_refused_only_for_a_positive_delay_level(
    producer: Producer, broker: RunningBroker
) -> None:
    entries = [BatchEntry(0, b"x", encode_properties({"TAGS": "T"}))]
    body = encode_batch_body(entries)
    delayed = v1_header(batch=True, properties=encode_properties({"DELAY": "2"}))
    refused = await send_raw(producer, delayed, body)
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL
    assert refused.remark == "batch messages may not be transactional or delayed"
    for level in ("0", "-1"):  # as RocketMQ: only a level above 0 delays
        header = v1_header(batch=True, properties=encode_properties({"DELAY": level}))
        response = await send_raw(producer, header, body)
        assert response.code == ResponseCode.SUCCESS, response.remark
    assert len(records(broker.config)) == 2


async def test_sends_are_turned_away_busy_while_the_writer_is_stuck(
    producer: Producer, broker: RunningBroker
) -> None:
    assert (await send_raw(producer, v1_header("Known"))).code == ResponseCode.SUCCESS
    store = broker.server.broker.store
    assert isinstance(store, DefaultMessageStore)
    # The writer has been inside one group for 10 s: past os_page_cache_busy_timeout_ms.
    store.writer.queue.busy_since = trio.current_time() - 10
    try:
        for topic in ("Known", "NotYetCreated"):  # the inline path and the task path
            response = await send_raw(producer, v1_header(topic))
            assert (response.code, response.remark) == (
                ResponseCode.SYSTEM_BUSY,
                "[REJECTREQUEST]system busy, start flow control for a while",
            )
            assert "MSG_REGION" in response.ext_fields
    finally:
        store.writer.queue.busy_since = None
    assert broker.server.broker.topics.find("NotYetCreated") is None
    assert (await send_raw(producer, v1_header("Known"))).code == ResponseCode.SUCCESS
    assert [r.topic for r in records(broker.config)] == ["Known", "Known"]


async def test_a_lone_surrogate_in_properties_is_stored_as_java_stores_it(
    producer: Producer, broker: RunningBroker
) -> None:
    # JSON may escape a lone surrogate; Java's getBytes(UTF_8) writes it as "?" and
    # String.hashCode still counts its code unit (0xD800) in the tags code.
    properties = "TAGS\x01a\ud800b\x02color\x01x\udfffy"
    response = await send_raw(producer, v1_header(properties=properties))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert "MSG_REGION" in response.ext_fields
    (record,) = records(broker.config)
    stored = decode_properties(record.properties)
    assert (stored["TAGS"], stored["color"]) == ("a?b", "x?y")
    consume = broker.server.broker.consume
    assert consume is not None
    await wait_until(lambda: consume.max_offset_in_queue("TopicA", 0) == 1)
    queue = consume.table.existing("TopicA", 0)
    unit = queue.get(0) if queue is not None else None
    assert unit is not None and unit.tags_code == (97 * 31 + 0xD800) * 31 + 98
