"""Messages: queryMsgById (an offset message id: the broker it names is asked) and
queryMsgByKey (every master broker of the topic is asked), with mqadmin's flags and fields."""

from __future__ import annotations

import datetime
from typing import Any

import click

from broker.admin_cli.common import (
    AdminError,
    BrokerAt,
    Target,
    admin_command,
    connect,
    route_masters,
    topic_route,
)
from broker.admin_cli.output import Report, Table
from broker.config import HostPort
from broker.inspect import record_json
from protocol.msgid import InvalidMessageIdError, decode_offset_msg_id, encode_offset_msg_id
from protocol.properties import MessageConst, decode_properties
from rmq_client.query import query_by_key, view_by_offset
from store.decode import CommitLogRecord


def _stamp(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def offset_id(rec: CommitLogRecord) -> str:
    ip, port = rec.store_host
    return encode_offset_msg_id(ip, port, rec.physical_offset)


def message_id(rec: CommitLogRecord) -> str:
    """What mqadmin shows as the message id: the client's unique key, else the offset id."""
    props = decode_properties(rec.properties)
    return props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or offset_id(rec)


@click.option("-i", "--msgId", "msg_id", required=True, help="An offset message id.")
@click.option("--body", "with_body", is_flag=True, help="Add the body (base64) to --json.")
async def query_msg_by_id(target: Target, msg_id: str, with_body: bool) -> Report:
    """Show the message stored under an offset message id (the id a send returns as offset
    id): asked of the broker the id names, or of -b."""
    try:
        ip, port, offset = decode_offset_msg_id(msg_id)
    except InvalidMessageIdError as exc:
        raise click.BadParameter(str(exc), param_hint="-i") from None
    address = target.broker or HostPort(ip, port)
    async with connect(target, address) as conn:
        rec = await view_by_offset(conn, offset)
    if rec is None:
        raise AdminError(f"message {msg_id} not found on broker {address}")
    props = decode_properties(rec.properties)
    data: dict[str, Any] = {"offsetMsgId": offset_id(rec), **record_json(rec, with_body)}
    fields = Table(["Field", "Value"])
    for name, value in (
        ("OffsetID:", offset_id(rec)),
        ("Topic:", rec.topic),
        ("Tags:", f"[{props.get(MessageConst.TAGS, '')}]"),
        ("Keys:", f"[{props.get(MessageConst.KEYS, '')}]"),
        ("Queue ID:", rec.queue_id),
        ("Queue Offset:", rec.queue_offset),
        ("CommitLog Offset:", rec.physical_offset),
        ("Reconsume Times:", rec.reconsume_times),
        ("Born Timestamp:", _stamp(rec.born_timestamp)),
        ("Store Timestamp:", _stamp(rec.store_timestamp)),
        ("Born Host:", data["born_host"]),
        ("Store Host:", data["store_host"]),
        ("System Flag:", rec.sys_flag),
        ("Properties:", props),
        ("Body Length:", len(rec.body or b"")),
    ):
        fields.add(name, value)
    return Report(data, [fields])


@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-k", "--msgKey", "key", required=True, help="A key (KEYS entry).")
@click.option("--max-num", default=64, show_default=True, type=click.IntRange(1, 64))
async def query_msg_by_key(target: Target, topic: str, key: str, max_num: int) -> Report:
    """List the messages of a topic with a key: message id, queue id, queue offset."""
    brokers = [BrokerAt("", target.broker)] if target.broker else None
    records: list[CommitLogRecord] = []
    for broker in brokers or route_masters(await topic_route(target, topic)):
        async with connect(target, broker.address) as conn:
            records += (await query_by_key(conn, topic, key, max_num=max_num)).records
    if not records:
        raise AdminError(f"no message of topic {topic!r} has key {key!r}")
    table = Table(["Message ID", "QID", "Offset"])
    rows = []
    for rec in sorted(records, key=lambda r: (r.queue_id, r.queue_offset)):
        table.add(message_id(rec), rec.queue_id, rec.queue_offset)
        rows.append(
            {
                "msgId": message_id(rec),
                "offsetMsgId": offset_id(rec),
                "queueId": rec.queue_id,
                "queueOffset": rec.queue_offset,
                "storeTimestamp": rec.store_timestamp,
            }
        )
    return Report({"topic": topic, "key": key, "messages": rows}, [table])


COMMANDS = [
    admin_command("queryMsgById", cluster=False)(query_msg_by_id),
    admin_command("queryMsgByKey", cluster=False)(query_msg_by_key),
]
