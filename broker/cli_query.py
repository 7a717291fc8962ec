"""`rmq-broker query`: find messages by key or by offset message id, in a store directory or
on a running broker, printed one JSON object per line as `inspect` prints them.

`--key K --topic T` asks QUERY_MESSAGE of a broker (`--addr`), or reads a store directory
(`--store-dir`, see `broker.inspect`); `--msg-id ID` takes an offset message id (what a send
returns as the offset id), asks VIEW_MESSAGE_BY_ID or reads the record at its offset. Exit 0
when something was found, 1 when nothing was (or the broker could not be asked), 2 for usage.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from typing import NoReturn

import click
import trio

from broker.config import ConfigError, HostPort
from broker.inspect import query_store, record_json, view_store
from protocol.msgid import InvalidMessageIdError, decode_offset_msg_id
from rmq_client.producer import UNREACHABLE, open_producer
from rmq_client.query import QueryError, query_by_key, view_by_offset
from store.decode import CommitLogRecord, RecordFormatError


def _failed(message: str) -> NoReturn:
    click.echo(f"rmq-broker: query: {message}", err=True)
    sys.exit(1)


@click.command()
@click.option("--key", default=None, help="A key (KEYS entry) or unique key (UNIQ_KEY).")
@click.option("--topic", default=None, help="The topic of --key.")
@click.option("--msg-id", default=None, help="An offset message id.")
@click.option("--addr", default=None, help="HOST:PORT of a running broker.")
@click.option("--store-dir", default=None, type=click.Path(file_okay=False, exists=True))
@click.option("--max-num", default=32, show_default=True, type=click.IntRange(min=1, max=64))
@click.option("--body", "with_body", is_flag=True, help="Add the body (base64) to each line.")
@click.option("--timeout", "timeout_s", default=10.0, show_default=True, type=float)
def query(  # noqa: PLR0917 (click passes every option)
    key: str | None,
    topic: str | None,
    msg_id: str | None,
    addr: str | None,
    store_dir: str | None,
    max_num: int,
    with_body: bool,
    timeout_s: float,
) -> None:
    """Print the messages with a key, or the one with an offset message id."""
    if (key is None) == (msg_id is None):
        raise click.UsageError("give either --key KEY --topic TOPIC or --msg-id ID")
    if key is not None and topic is None:
        raise click.UsageError("--key needs --topic")
    if (addr is None) == (store_dir is None):
        raise click.UsageError("give either --addr HOST:PORT or --store-dir DIR")
    if not 0 < timeout_s < float("inf"):
        raise click.BadParameter(f"{timeout_s!r} is not a positive number of seconds")
    offset = None
    if msg_id is not None:
        try:
            offset = decode_offset_msg_id(msg_id)[2]
        except InvalidMessageIdError as exc:
            raise click.BadParameter(str(exc), param_hint="--msg-id") from None
    if store_dir is not None:
        count = _from_store(store_dir, topic, key, offset, max_num, with_body)
    else:
        assert addr is not None
        try:
            address = HostPort.parse("--addr", addr)
        except ConfigError as exc:
            raise click.BadParameter(str(exc)) from None
        ask = partial(_ask, address, topic, key, offset, max_num, timeout_s)
        try:
            records = trio.run(ask)
        except UNREACHABLE as exc:
            _failed(f"broker {address.host}:{address.port} unreachable: {exc or type(exc)}")
        except QueryError as exc:
            _failed(f"broker refused: {exc}")
        for rec in records:
            click.echo(json.dumps(record_json(rec, with_body), ensure_ascii=False))
        count = len(records)
    click.echo(f"{count} records", err=True)
    sys.exit(0 if count else 1)


def _from_store(  # noqa: PLR0917
    store_dir: str,
    topic: str | None,
    key: str | None,
    offset: int | None,
    max_num: int,
    with_body: bool,
) -> int:
    if not os.path.isdir(os.path.join(store_dir, "commitlog")):
        _failed(f"{store_dir} is not a store (no commitlog directory)")
    try:
        if offset is not None:
            return view_store(store_dir, offset, with_body=with_body, emit=click.echo)
        assert topic is not None and key is not None
        return query_store(
            store_dir, topic=topic, key=key, max_num=max_num, with_body=with_body, emit=click.echo
        )
    except RecordFormatError as exc:
        _failed(f"damaged record at offset {exc.offset}: {exc.reason}")
    except OSError as exc:
        _failed(f"cannot read {exc.filename or store_dir}: {exc.strerror or exc}")


async def _ask(  # noqa: PLR0917
    address: HostPort,
    topic: str | None,
    key: str | None,
    offset: int | None,
    max_num: int,
    timeout_s: float,
) -> list[CommitLogRecord]:
    with trio.fail_after(timeout_s):
        async with open_producer(address.host, address.port, timeout_s=timeout_s) as conn:
            if offset is not None:
                record = await view_by_offset(conn, offset)
                return [] if record is None else [record]
            assert topic is not None and key is not None
            return (await query_by_key(conn, topic, key, max_num=max_num)).records
