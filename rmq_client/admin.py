"""Admin calls of RocketMQ 4.9 (topics, broker configuration and figures) over the project's
client connection, for tests, the `rmq-broker admin` CLI and the dashboard.

    async with open_admin("127.0.0.1", 10911) as admin:
        await admin.create_topic("Orders", queues=8)
        stats = await admin.topic_stats("Orders")

Each call sends one request and decodes its answer; any code but SUCCESS raises
`rmq_client.producer.SendError` with the broker's code and remark. The name-server calls
(`all_topics`, `topics_by_cluster`, `delete_topic_in_namesrv`, `wipe_write_perm`,
`add_write_perm`) go to whatever address the connection is open to: a broker's own port or
its name-server port.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from protocol.acl_signing import SessionCredentials
from protocol.admin_topic import (
    AddWritePermOfBrokerResponseHeader,
    CreateTopicRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetBrokerConfigResponseHeader,
    KVTable,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRequestHeader,
    TopicStatsTable,
    WipeWritePermOfBrokerResponseHeader,
    parse_properties,
    properties_text,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.producer import DEFAULT_TIMEOUT_S, Producer, SendError, open_producer

#: PERM_READ | PERM_WRITE: what mqadmin updateTopic gives when -p is not set
DEFAULT_PERM = 6
ADMIN_GROUP = "TOOLS_CONSOLE"


class AdminClient:
    """Admin requests on one open connection (`open_admin`)."""

    def __init__(self, connection: Producer) -> None:
        self.connection = connection

    async def _call(
        self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        response = await self.connection.request(RemotingCommand.request(code, ext, body))
        if response.code != ResponseCode.SUCCESS:
            raise SendError(response.code, response.remark)
        return response

    async def create_topic(
        self,
        topic: str,
        queues: int = 8,
        *,
        write_queues: int | None = None,
        perm: int = DEFAULT_PERM,
        order: bool = False,
        topic_filter_type: str = "SINGLE_TAG",
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC: `queues` read queues and `write_queues` (default the same)
        write queues."""
        header = CreateTopicRequestHeader(
            topic,
            "TBW102",
            queues,
            queues if write_queues is None else write_queues,
            perm,
            topic_filter_type,
            0,
            order,
        )
        await self._call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())

    async def delete_topic(self, topic: str) -> None:
        """DELETE_TOPIC_IN_BROKER."""
        ext = TopicRequestHeader(topic).to_ext_fields()
        await self._call(RequestCode.DELETE_TOPIC_IN_BROKER, ext)

    async def topic_configs(self) -> TopicConfigSerializeWrapper:
        """GET_ALL_TOPIC_CONFIG: every topic of the broker."""
        response = await self._call(RequestCode.GET_ALL_TOPIC_CONFIG)
        return TopicConfigSerializeWrapper.from_json(response.body)

    async def topic_stats(self, topic: str) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO: min/max offset and last store time per queue."""
        ext = TopicRequestHeader(topic).to_ext_fields()
        response = await self._call(RequestCode.GET_TOPIC_STATS_INFO, ext)
        return TopicStatsTable.from_json(response.body)

    async def all_topics(self) -> frozenset[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        response = await self._call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return TopicList.from_json(response.body).topic_list

    async def topics_by_cluster(self, cluster: str) -> frozenset[str]:
        """GET_TOPICS_BY_CLUSTER."""
        response = await self._call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster})
        return TopicList.from_json(response.body).topic_list

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV."""
        ext = DeleteTopicFromNamesrvRequestHeader(topic, cluster).to_ext_fields()
        await self._call(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)

    async def wipe_write_perm(self, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER: the number of topics made read-only."""
        fields = await self._write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_name)
        return WipeWritePermOfBrokerResponseHeader.from_ext_fields(fields).wipe_topic_count

    async def add_write_perm(self, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER: the number of topics made writable again."""
        fields = await self._write_perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_name)
        return AddWritePermOfBrokerResponseHeader.from_ext_fields(fields).add_topic_count

    async def _write_perm(self, code: RequestCode, broker_name: str) -> dict[str, str]:
        response = await self._call(code, {"brokerName": broker_name})
        return response.ext_fields

    async def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's figures (versions, offsets, TPS, disk)."""
        response = await self._call(RequestCode.GET_BROKER_RUNTIME_INFO)
        return KVTable.from_json(response.body).table

    async def broker_config(self) -> tuple[dict[str, str], dict[str, int]]:
        """GET_BROKER_CONFIG: (camelCase key -> value, the configuration's data version)."""
        response = await self._call(RequestCode.GET_BROKER_CONFIG)
        version = GetBrokerConfigResponseHeader.from_ext_fields(response.ext_fields).version
        return parse_properties(response.body), json.loads(version)

    async def update_broker_config(self, changes: Mapping[str, str]) -> None:
        """UPDATE_BROKER_CONFIG: run-time keys only (camelCase or snake_case)."""
        await self._call(RequestCode.UPDATE_BROKER_CONFIG, body=properties_text(changes))


@asynccontextmanager
async def open_admin(
    host: str,
    port: int,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    credentials: SessionCredentials | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[AdminClient]:
    """Connect to a broker (or its name-server port) for admin calls; closed at block end."""
    async with open_producer(
        host,
        port,
        group=ADMIN_GROUP,
        timeout_s=timeout_s,
        credentials=credentials,
        ssl_context=ssl_context,
    ) as connection:
        yield AdminClient(connection)
