"""INVOKE_BROKER_TO_RESET_OFFSET (222): move a consumer group's offsets of a topic to a time.

As 4.9's `Broker2Client.resetOffset`: for each write queue of the topic the target is the first
offset stored at or after `timestamp` (each queue's end for -1); without `isForce` a queue only
moves back (a target past the committed offset keeps the committed one). A group that never
committed on the topic is refused (SYSTEM_ERROR), a group without live clients too
(CONSUMER_NOT_ONLINE: mqadmin then falls back to resetting offsets one by one). Each live client
gets a RESET_CONSUMER_CLIENT_OFFSET (oneway) with the table, in the form its language reads
(`ResetOffsetBodyForC` for the C++ client, where 4.9 goes by the admin's language instead), and
the admin gets the table back.

Unlike 4.9, the broker also writes the new offsets into its own table: a client that restarts
before it commits, or one that ignores the request, starts from the reset offsets too.
"""

from __future__ import annotations

from typing import Final

import structlog

from broker.processors import RequestContext
from protocol.admin_group import MessageQueue, ResetOffsetBody, ResetOffsetRequestHeader
from protocol.codes import LanguageCode, RequestCode, ResponseCode
from protocol.command import RemotingCommand

#: `MQVersion.Version.V3_0_7_SNAPSHOT.ordinal()`: older clients cannot reset
MIN_RESET_VERSION: Final = 28

log = structlog.get_logger()


class ResetOffsetProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        topic, group = header.topic, header.group
        config = broker.topics.find(topic)
        if config is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            )
        consume = broker.consume
        table: dict[MessageQueue, int] = {}
        for queue_id in range(config.write_queue_nums):
            committed = broker.offsets.query(group, topic, queue_id)
            if committed is None:
                return request.make_response(
                    ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist"
                )
            if consume is None:
                target = 0
            elif header.timestamp == -1:
                target = consume.max_offset_in_queue(topic, queue_id)
            else:
                target = consume.offset_by_time(topic, queue_id, header.timestamp)
            target = max(target, 0)
            mq = MessageQueue(topic, broker.config.broker_name, queue_id)
            table[mq] = target if header.is_force or target < committed else committed
        info = broker.consumers.group_info(group)
        if info is None:
            return request.make_response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                f"Timestamp: {header.timestamp}",
            )
        old = [c for c in info.clients.values() if c.version < MIN_RESET_VERSION]
        if old:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"the client does not support this feature. version={old[0].version}",
            )
        body = ResetOffsetBody(table)
        ext = ResetOffsetRequestHeader(topic, group, header.timestamp).to_ext_fields()
        told = []
        for client_id, client in sorted(info.clients.items()):
            payload = body.encode_for_c() if client.language == LanguageCode.CPP else body.encode()
            command = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(ext), payload, oneway=True
            )
            if client.push(command):
                told.append(client_id)
            else:
                log.warning("reset_offset_not_sent", group=group, client_id=client_id)
        broker.offsets.set_offsets(group, topic, {mq.queue_id: o for mq, o in table.items()})
        await broker.offsets.persist()
        log.info(
            "offsets_reset",
            topic=topic,
            group=group,
            timestamp=header.timestamp,
            force=header.is_force,
            clients=told,
            remote=ctx.remote_text,
        )
        return request.make_response(ResponseCode.SUCCESS, body=body.encode())
