"""`DefaultRequestProcessor`: every request code the name server answers, and how.

Mirrors 4.9's `namesrv/processor/DefaultRequestProcessor.java`, answer for answer (codes and
remarks), over `RouteInfoManager` and `KVConfigManager`. Where 4.9 would throw, log and answer
SUCCESS, or let a peer grow a table without limit, this one answers a code and a remark and
leaves the tables as they were: a registration whose header or body is bad (CRC, encoding,
bounds) changes nothing, so the broker's earlier routes stay. Bad input from a peer is a
`HeaderFieldError` carrying its code; `process` turns it into the response. Knows nothing of
sockets: the server passes the connection's id and the peer's address.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields, replace
from typing import Final

import structlog

from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigFullError, KVConfigManager
from namesrv.routeinfo import FLAG_UNIT, FLAG_UNIT_SUB, RouteInfoManager
from protocol.admin_topic import (
    AddWritePermOfBrokerResponseHeader,
    BrokerNameRequestHeader,
    DataVersion,
    DeleteTopicFromNamesrvRequestHeader,
    GetTopicsByClusterRequestHeader,
    TopicList,
    WipeWritePermOfBrokerResponseHeader,
    properties_text,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from protocol.headers import GetRouteInfoRequestHeader
from protocol.namesrv_headers import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    KVConfigRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    crc32_of,
)
from protocol.register_broker import (
    RegisterBrokerBody,
    decode_data_version,
    encode_data_version,
)

FAQ_SUFFIX: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Peer:
    """The connection a request arrived on."""

    conn_id: int
    #: the address as logs write it
    remote: str
    address: tuple[str, int] = ("?", 0)


Handler = Callable[[RemotingCommand, Peer], Awaitable[RemotingCommand]]


class DefaultRequestProcessor:
    def __init__(
        self, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager
    ) -> None:
        self.config = config
        self.routes = routes
        self.kv = kv
        self.handlers: dict[int, Handler] = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            RequestCode.GET_UNIT_TOPIC_LIST: self.get_unit_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_unit_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_unit_topic_list,
            RequestCode.GET_NAMESRV_CONFIG: self.get_namesrv_config,
        }

    async def process(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        """The response to `request`: an unknown code, bad input and a fault of ours each get
        their code and remark. Never raises (except for cancellation)."""
        if request.header_error is not None:
            error = request.header_error
            return request.make_response(error.response_code, str(error))
        handler = self.handlers.get(request.code)
        if handler is None:
            return request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        try:
            return await handler(request, peer)
        except HeaderFieldError as exc:
            return request.make_response(exc.response_code, str(exc))
        except Exception as exc:
            # A fault of ours: answered, so the peer's connection (and the brokers registered
            # on it) stays; the traceback goes to the log.
            log.exception("processor_failed", code=RequestCode.name_of(request.code))
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc) or repr(exc))

    # -- brokers -----------------------------------------------------------------------------

    async def register_broker(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields).checked()
        if header.body_crc32 != 0 and crc32_of(request.body) != header.body_crc32:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if request.body is None:
            body = RegisterBrokerBody((), DataVersion(0, 0), ())
        else:
            body = RegisterBrokerBody.decode(
                request.body,
                header.compressed,
                max_topics=self.config.max_topics_per_registration,
                max_inflated=self.config.max_register_body_bytes,
            )
        result = self.routes.register_broker(
            header.cluster_name,
            header.broker_addr,
            header.broker_name,
            header.broker_id,
            header.ha_server_addr,
            body.data_version,
            body.topics,
            list(body.filter_server_list),
            peer.conn_id,
        )
        ext = RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr)
        order_topics = self.kv.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return request.make_response(
            ResponseCode.SUCCESS, ext_fields=ext.to_ext_fields(), body=order_topics
        )

    async def unregister_broker(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = UnRegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        self.routes.unregister_broker(
            header.cluster_name, header.broker_addr, header.broker_name, header.broker_id
        )
        return request.make_response(ResponseCode.SUCCESS)

    async def query_data_version(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = QueryDataVersionRequestHeader.from_ext_fields(request.ext_fields)
        version = decode_data_version(request.body)
        changed = self.routes.is_broker_topic_config_changed(header.broker_addr, version)
        if not changed:
            self.routes.update_broker_info_update_timestamp(header.broker_addr)
        ours = self.routes.query_broker_topic_config(header.broker_addr)
        body = None if ours is None else encode_data_version(ours)
        ext = QueryDataVersionResponseHeader(changed).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=ext, body=body)

    async def write_perm_of_broker(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = BrokerNameRequestHeader.from_ext_fields(request.ext_fields)
        wipe = request.code == RequestCode.WIPE_WRITE_PERM_OF_BROKER
        count = self.routes.operate_write_perm_of_broker(header.broker_name, wipe)
        log.info(
            "broker_write_perm_wiped" if wipe else "broker_write_perm_added",
            broker_name=header.broker_name,
            topics=count,
            remote=peer.remote,
        )
        ext = (
            WipeWritePermOfBrokerResponseHeader(count)
            if wipe
            else AddWritePermOfBrokerResponseHeader(count)
        ).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)

    # -- routes and topics -------------------------------------------------------------------

    async def get_route_info_by_topic(
        self, request: RemotingCommand, peer: Peer
    ) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
        route = self.routes.pickup_topic_route_data(header.topic)
        if route is None:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}{FAQ_SUFFIX}",
            )
        if self.config.order_message_enable:
            conf = self.kv.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, header.topic)
            route = replace(route, order_topic_conf=conf)
        return request.make_response(ResponseCode.SUCCESS, body=route.to_json())

    async def get_broker_cluster_info(
        self, request: RemotingCommand, peer: Peer
    ) -> RemotingCommand:
        body = self.routes.get_all_cluster_info().to_json()
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def get_all_topic_list(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        body = TopicList(self.routes.get_all_topic_list()).to_json()
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def get_topics_by_cluster(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields)
        body = TopicList(self.routes.get_topics_by_cluster(header.cluster)).to_json()
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def get_system_topic_list(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        names, addr = self.routes.get_system_topic_list()
        return request.make_response(ResponseCode.SUCCESS, body=TopicList(names, addr).to_json())

    async def get_unit_topic_list(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        """GET_UNIT_TOPIC_LIST (311), GET_HAS_UNIT_SUB_TOPIC_LIST (312) and
        GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST (313), by the topics' sys flags."""
        topics = self.routes.topics_by_sys_flag(_UNIT_PICKS[request.code])
        return request.make_response(ResponseCode.SUCCESS, body=TopicList(topics).to_json())

    async def get_namesrv_config(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        """GET_NAMESRV_CONFIG (319): the settings as Java properties, 4.9's names where it has
        one (`kvConfigPath`, `listenPort`, ...), the others in camelCase."""
        return request.make_response(ResponseCode.SUCCESS, body=config_properties(self.config))

    async def delete_topic_in_namesrv(
        self, request: RemotingCommand, peer: Peer
    ) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(request.ext_fields)
        existed = self.routes.delete_topic(header.topic, header.cluster_name)
        log.info(
            "topic_route_deleted",
            topic=header.topic,
            cluster=header.cluster_name,
            existed=existed,
            remote=peer.remote,
        )
        return request.make_response(ResponseCode.SUCCESS)

    # -- KV config ---------------------------------------------------------------------------

    async def put_kv_config(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = PutKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        self._check_kv_lengths(header.namespace, header.key, header.value)
        try:
            await self.kv.put_kv_config(header.namespace, header.key, header.value)
        except KVConfigFullError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        except OSError as exc:
            return _not_persisted(request, exc)
        return request.make_response(ResponseCode.SUCCESS)

    async def get_kv_config(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = KVConfigRequestHeader.from_ext_fields(request.ext_fields)
        value = self.kv.get_kv_config(header.namespace, header.key)
        if value is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        ext = GetKVConfigResponseHeader(value).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)

    async def delete_kv_config(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        header = KVConfigRequestHeader.from_ext_fields(request.ext_fields)
        try:
            await self.kv.delete_kv_config(header.namespace, header.key)
        except OSError as exc:
            return _not_persisted(request, exc)
        return request.make_response(ResponseCode.SUCCESS)

    async def get_kv_list_by_namespace(
        self, request: RemotingCommand, peer: Peer
    ) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.from_ext_fields(request.ext_fields)
        body = self.kv.get_kv_list_by_namespace(header.namespace)
        if body is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}"
            )
        return request.make_response(ResponseCode.SUCCESS, body=body)

    def _check_kv_lengths(self, *texts: str) -> None:
        limit = self.config.max_kv_field_length
        for name, text in zip(("namespace", "key", "value"), texts, strict=False):
            if len(text) > limit:
                raise HeaderFieldError(
                    name, f"{name}: {len(text)} characters are more than {limit}"
                )


_UNIT_PICKS: Final[dict[int, Callable[[int], bool]]] = {
    RequestCode.GET_UNIT_TOPIC_LIST: lambda flag: bool(flag & FLAG_UNIT),
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: lambda flag: bool(flag & FLAG_UNIT_SUB),
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: (
        lambda flag: not flag & FLAG_UNIT and bool(flag & FLAG_UNIT_SUB)
    ),
}
#: NamesrvConfig fields under their 4.9 names (`NamesrvConfig`, `NettyServerConfig`)
_JAVA_NAMES: Final = {
    "listen_port": "listenPort",
    "idle_timeout_s": "serverChannelMaxIdleTimeSeconds",
}


def config_properties(config: NamesrvConfig) -> bytes:
    """Every setting as `name=value` lines, names in camelCase."""
    values: dict[str, str] = {}
    for item in fields(config):
        name = _JAVA_NAMES.get(item.name) or re.sub(r"_([a-z])", lambda m: m[1].upper(), item.name)
        value = getattr(config, item.name)
        values[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return properties_text(values)


def _not_persisted(request: RemotingCommand, exc: OSError) -> RemotingCommand:
    remark = f"the KV config cannot be written: {exc.strerror or exc}"
    return request.make_response(ResponseCode.SYSTEM_ERROR, remark)
