"""Hostile admin requests: random headers and bodies for every topic and broker admin code,
sent to a running broker over a real socket. Each is answered with a code and, when refused, a
remark; no processor fails with an exception (`processor_failed`), the broker keeps serving,
and what it persisted reloads to the table it serves."""

from __future__ import annotations

import json
import pathlib
import random

import trio
from structlog.testing import capture_logs

from broker.topic_config import TopicConfigManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.admin import open_admin
from rmq_client.producer import Message, open_producer
from tests.conftest import make_config, start_broker

CODES = (
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.GET_TOPIC_STATS_INFO,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    RequestCode.GET_TOPICS_BY_CLUSTER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.GET_BROKER_RUNTIME_INFO,
    RequestCode.GET_BROKER_CONFIG,
    RequestCode.UPDATE_BROKER_CONFIG,
)
FIELDS = (
    "topic",
    "defaultTopic",
    "readQueueNums",
    "writeQueueNums",
    "perm",
    "topicFilterType",
    "topicSysFlag",
    "order",
    "cluster",
    "clusterName",
    "brokerName",
)
VALUES = (
    "Hostile",
    "Hostile2",
    "%RETRY%g",
    "",
    " ",
    "0",
    "1",
    "8",
    "-1",
    "1024",
    "1025",
    "2147483648",
    "99999999999999999999",
    "true",
    "x" * 300,
    "é\u202e",
    "broker-a",
    "DefaultCluster",
    "SINGLE_TAG",
    "MULTI_TAG",
    "TBW102",
)
BODIES = (
    None,
    b"",
    b"\xff\xfe",
    b"brokerPermission=6\n",
    b"brokerPermission=x\n",
    b"listen=1\n",
    b"=\n",
    b"traceOn=true\nregionId=\\u00e9\n",
    b"maxMessageSize=-5\n",
    b"maxConnections=10000\n",
    b'{"a":1}',
)


async def test_random_admin_requests_are_answered_never_crash(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store")
    broker = await start_broker(nursery, config)
    rng = random.Random(20)
    codes: dict[int, int] = {}
    with capture_logs() as logs:
        async with open_admin("127.0.0.1", broker.port) as admin:
            for _ in range(400):
                ext = {f: rng.choice(VALUES) for f in rng.sample(FIELDS, rng.randint(0, 8))}
                code = rng.choice(CODES)
                body = rng.choice(BODIES)
                request = RemotingCommand.request(code, ext, body)
                response = await admin.connection.request(request)
                codes[response.code] = codes.get(response.code, 0) + 1
                assert response.code in (
                    ResponseCode.SUCCESS,
                    ResponseCode.SYSTEM_ERROR,
                    ResponseCode.TOPIC_NOT_EXIST,
                ), (code, ext, body, response.code, response.remark)
                if response.code != ResponseCode.SUCCESS:
                    assert response.remark, (code, ext, body)
            served = (await admin.topic_configs()).topic_config_table
    assert not [e for e in logs if e["event"] == "processor_failed"]
    assert codes[ResponseCode.SUCCESS] > 50 and codes[ResponseCode.SYSTEM_ERROR] > 50
    # the broker still takes messages (brokerPermission only ever went back to 6)
    async with open_producer("127.0.0.1", broker.port) as producer:
        await producer.send(Message("AfterHostile", b"x"))
    await broker.stop()
    saved = json.loads((tmp_path / "store" / "config" / "topics.json").read_text())
    reloaded = TopicConfigManager(tmp_path / "store" / "config" / "topics.json").topics()
    for name, topic in served.items():
        if name != "AfterHostile":
            assert name in saved["topicConfigTable"]
            got = reloaded[name]
            assert (got.read_queue_nums, got.write_queue_nums, got.perm) == (
                topic.read_queue_nums,
                topic.write_queue_nums,
                topic.perm,
            )
