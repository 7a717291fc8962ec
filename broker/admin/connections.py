"""Who is connected: GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204),
and GET_CONSUMER_RUNNING_INFO (307), which the broker relays to one consumer.

The connection lists come from the clients' heartbeats (client id, address, language and
version of each, and for a consumer group the subscriptions and consume settings its latest
heartbeat named). A group with no live client is CONSUMER_NOT_ONLINE (consumers) or
SYSTEM_ERROR (producers), with 4.9's remarks.

GET_CONSUMER_RUNNING_INFO goes to the named client's own connection (`RequestContext.ask` of
that connection, `broker.client_calls`) with the admin's header fields and body, and the
client's answer (code, remark, header fields, body) is the admin's answer. A client that is
not online, or too old (before 3.1.8), is SYSTEM_ERROR; one that does not answer within
`CALL_CLIENT_TIMEOUT_S` (4.9's 10 s) is CONSUME_MSG_TIMEOUT; a connection that closes or
cannot take the request is SYSTEM_ERROR.
"""

from __future__ import annotations

from typing import Final

import structlog

from broker.client_calls import ClientCallError
from broker.processors import RequestContext
from protocol.admin_group import (
    Connection,
    ConsumerConnection,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetProducerConnectionListRequestHeader,
    ProducerConnection,
)
from protocol.codes import LanguageCode, RequestCode, ResponseCode
from protocol.command import RemotingCommand

CALL_CLIENT_TIMEOUT_S: Final = 10.0
#: `MQVersion.Version.V3_1_8_SNAPSHOT.ordinal()`: older clients cannot answer
MIN_RUNNING_INFO_VERSION: Final = 62

log = structlog.get_logger()


def language_name(language: int) -> str:
    try:
        return LanguageCode(language).name
    except ValueError:
        return LanguageCode.OTHER.name


def _address(remote: tuple[str, int]) -> str:
    ip, port = remote
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class GetConsumerConnectionListProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetConsumerConnectionListRequestHeader.from_ext_fields(request.ext_fields)
        info = ctx.broker.consumers.group_info(header.consumer_group)
        if info is None:
            return request.make_response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{header.consumer_group}] not online",
            )
        connections = tuple(
            Connection(client_id, c.remote, language_name(c.language), c.version)
            for client_id, c in sorted(info.clients.items())
        )
        body = ConsumerConnection(
            connections,
            dict(info.subscriptions),
            info.consume_type,
            info.message_model,
            info.consume_from_where,
        )
        return request.make_response(ResponseCode.SUCCESS, body=body.encode())


class GetProducerConnectionListProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetProducerConnectionListRequestHeader.from_ext_fields(request.ext_fields)
        channels = ctx.broker.producers.channels(header.producer_group)
        if not channels:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"the producer group[{header.producer_group}] not exist",
            )
        connections = tuple(
            Connection(ch.client_id, _address(ch.remote), language_name(ch.language), ch.version)
            for ch in sorted(channels, key=lambda ch: (ch.client_id, ch.conn_id))
        )
        return request.make_response(
            ResponseCode.SUCCESS, body=ProducerConnection(connections).encode()
        )


class GetConsumerRunningInfoProcessor:
    def __init__(self, timeout_s: float | None = None) -> None:
        #: None: `CALL_CLIENT_TIMEOUT_S`, read at each call
        self.timeout_s = timeout_s

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields)
        group, client_id = header.consumer_group, header.client_id
        info = ctx.broker.consumers.group_info(group)
        client = info.clients.get(client_id) if info is not None else None
        if client is None or client.ask is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        if client.version < MIN_RUNNING_INFO_VERSION:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{client_id}> Version <{client.version}> too low to finish, "
                "please upgrade it to V3_1_8_SNAPSHOT",
            )
        relayed = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, dict(request.ext_fields), request.body
        )
        try:
            timeout_s = CALL_CLIENT_TIMEOUT_S if self.timeout_s is None else self.timeout_s
            answer = await client.ask(relayed, timeout_s)
        except ClientCallError as exc:
            log.warning(
                "consumer_running_info_failed", group=group, client_id=client_id, error=str(exc)
            )
            if exc.timed_out:
                return request.make_response(
                    ResponseCode.CONSUME_MSG_TIMEOUT,
                    f"consumer <{group}> <{client_id}> Timeout: {exc}",
                )
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> Exception: {exc}",
            )
        return request.make_response(answer.code, answer.remark, answer.ext_fields, answer.body)
