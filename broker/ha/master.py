"""A master's side of replication (RocketMQ 4.9 `HAService.AcceptSocketService` and
`HAConnection`): the HA listener and one connection per slave.

Per connection, one task reads the slave's offset reports (the first one says where to start;
every one is an acknowledgement SYNC_MASTER puts wait for) and one task streams the commit log
from that offset in transfer frames of at most `ha_transfer_batch_size` bytes, with an empty frame
as heartbeat after `ha_send_heartbeat_interval` ms of silence. An empty slave (offset 0) starts at
the beginning of the master's last segment, as 4.9's does. A connection silent for
`ha_housekeeping_interval` ms, a bad report or a slave that asks for bytes the master does not
have is closed with one log event; the slave reconnects.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable

import structlog
import trio

from protocol.ha import HAProtocolError, ReportDecoder, encode_transfer
from store.config import MessageStoreConfig
from store.message_store import DefaultMessageStore

log = structlog.get_logger()

RECEIVE_BYTES = 4096
#: how long the stream task waits for new data before it looks again
DATA_POLL_S = 0.1

_conn_ids = itertools.count(1)
_Part = Callable[[], Awaitable[None]]


class SlaveGoneError(Exception):
    """The connection ends; the message says why (logged once)."""


class HAConnection:
    """One slave's connection: its reports in, the commit log out."""

    def __init__(self, store: DefaultMessageStore, stream: trio.SocketStream) -> None:
        self.store = store
        self.config: MessageStoreConfig = store.config
        self.stream = stream
        self.conn_id = next(_conn_ids)
        #: where the slave asked to start (-1: no report yet), its last acknowledgement
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self._first_report = trio.Event()

    async def run(self) -> None:
        remote = _peer(self.stream)
        transfer = self.store.transfer
        if transfer is not None:
            transfer.slave_connected()
        log.info("ha_slave_connected", conn_id=self.conn_id, remote=remote)
        reason = "closed"
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, self._read_reports, nursery)
                nursery.start_soon(self._guard, self._stream_log, nursery)
        except* SlaveGoneError as gone:
            reason = str(gone.exceptions[0])
        finally:
            if transfer is not None:
                transfer.slave_disconnected()
            with trio.CancelScope(shield=True):
                await self.stream.aclose()
        log.info(
            "ha_slave_disconnected",
            conn_id=self.conn_id,
            remote=remote,
            reason=reason,
            acked=self.slave_ack_offset,
        )

    async def _guard(self, part: _Part, nursery: trio.Nursery) -> None:
        """Run one half; its end (for whatever reason) ends the connection."""
        try:
            await part()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise SlaveGoneError(f"connection lost: {exc!r}") from None
        except HAProtocolError as exc:
            raise SlaveGoneError(f"bad report: {exc}") from None
        nursery.cancel_scope.cancel()

    async def _read_reports(self) -> None:
        decoder = ReportDecoder()
        idle_s = self.config.ha_housekeeping_interval / 1000
        transfer = self.store.transfer
        while True:
            with trio.move_on_after(idle_s) as waited:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            if waited.cancelled_caught:
                raise SlaveGoneError(f"no report for {idle_s:g} s")
            if not data:
                raise SlaveGoneError("the slave closed the connection")
            offsets = decoder.feed(data)
            if not offsets:
                continue
            offset = offsets[-1]  # only the latest counts (4.9 reads the last whole one)
            if self.slave_request_offset < 0:
                self.slave_request_offset = offset
                self._first_report.set()
            self.slave_ack_offset = offset
            if transfer is not None:
                transfer.notify_transfer_some(offset)

    async def _stream_log(self) -> None:
        await self._first_report.wait()
        store = self.store
        config = self.config
        offset = self.slave_request_offset
        if offset == 0:
            end = store.max_offset
            offset = end - end % config.mapped_file_size_commit_log
        log.info("ha_transfer_started", conn_id=self.conn_id, offset=offset)
        heartbeat_s = config.ha_send_heartbeat_interval / 1000
        batch = config.ha_transfer_batch_size
        last_write = trio.current_time()
        while True:
            data = store.replica.read_from(offset, batch)
            if data is None:
                raise SlaveGoneError(
                    f"the slave asks for offset {offset}, outside the master's log "
                    f"{store.min_offset}..{store.max_offset}"
                )
            if data:
                await self.stream.send_all(encode_transfer(offset, data))
                offset += len(data)
                last_write = trio.current_time()
                continue
            if trio.current_time() - last_write >= heartbeat_s:
                await self.stream.send_all(encode_transfer(offset))
                last_write = trio.current_time()
            await store.replica.wait_for_data(offset, min(DATA_POLL_S, heartbeat_s))


async def serve_ha(
    store: DefaultMessageStore,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen for slaves on `host:port` (0: any free port); report the bound port. Raises
    OSError when the address cannot be bound."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info("ha_listening", host=host, port=bound)

    async def handler(stream: trio.SocketStream) -> None:
        try:
            await HAConnection(store, stream).run()
        except Exception:
            # A fault in one slave's connection ends that connection, not the broker.
            log.exception("ha_connection_failed")

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handler, listeners)
        task_status.started(bound)


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"
