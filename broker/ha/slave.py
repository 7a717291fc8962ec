"""A slave's side of replication (RocketMQ 4.9 `HAService.HAClient`).

Connects to the master's HA address, reports its commit log's end at once, after every append
and every `ha_send_heartbeat_interval` ms, and appends each transfer frame's bytes at exactly
the offset the frame names (the store refuses any other: the connection is then closed and
the next one starts again from the slave's real end). No byte for `ha_housekeeping_interval` ms
closes the connection too. The master's address comes from `ha_master_address` or, later, from
the name server's answer to the registration (`update_master_address`); while there is none the
client waits. Every connection attempt that fails is one log event, then a pause.
"""

from __future__ import annotations

import structlog
import trio

from broker.config import HostPort
from protocol.ha import HAProtocolError, TransferDecoder, encode_report
from store.message_store import DefaultMessageStore
from store.replica import ReplicaAppendError

log = structlog.get_logger()

RECEIVE_BYTES = 64 * 1024
#: pause after a failed connection or a dropped one (4.9 waits 5 s; a restart is quicker here)
RECONNECT_PAUSE_S = 1.0
CONNECT_TIMEOUT_S = 3.0


class HAClient:
    def __init__(self, store: DefaultMessageStore, master: HostPort | None) -> None:
        self.store = store
        self.master = master
        self._master_changed = trio.Event()
        #: what the master last heard from us, and the end of the data it sent us last
        self.reported_offset = -1
        self.master_offset = -1
        self.connected = False

    def update_master_address(self, master: HostPort | None) -> None:
        """The master's HA address changed (the registration's answer): reconnect to it."""
        if master == self.master:
            return
        log.info("ha_master_address_changed", old=str(self.master), new=str(master))
        self.master = master
        self._master_changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            master = self.master
            self._master_changed = trio.Event()
            if master is None:
                await self._master_changed.wait()
                continue
            changed = self._master_changed
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_when_set, changed, nursery.cancel_scope)
                await self._connect_once(master)
                if not changed.is_set():
                    with trio.move_on_after(RECONNECT_PAUSE_S):
                        await changed.wait()
                nursery.cancel_scope.cancel()

    async def _connect_once(self, master: HostPort) -> None:
        try:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                stream = await trio.open_tcp_stream(master.host, master.port)
        except (OSError, trio.TooSlowError) as exc:
            log.warning("ha_master_connect_failed", master=str(master), error=repr(exc))
            return
        self.connected = True
        log.info("ha_master_connected", master=str(master), offset=self.store.written_offset)
        reason = "closed"
        try:
            await self._session(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            reason = f"connection lost: {exc!r}"
        except HAProtocolError as exc:
            reason = f"bad frame: {exc}"
        except ReplicaAppendError as exc:
            reason = f"refused: {exc}"
        except Exception as exc:
            # A fault here ends this connection, not the broker; the next one starts afresh.
            log.exception("ha_client_failed", master=str(master))
            reason = f"fault: {exc!r}"
        finally:
            self.connected = False
            with trio.CancelScope(shield=True):
                await stream.aclose()
        log.info("ha_master_disconnected", master=str(master), reason=reason)

    async def _session(self, stream: trio.SocketStream) -> None:
        store = self.store
        config = store.config
        heartbeat_s = config.ha_send_heartbeat_interval / 1000
        idle_s = config.ha_housekeeping_interval / 1000
        decoder = TransferDecoder()
        await self._report(stream)
        next_report = trio.current_time() + heartbeat_s
        last_read = trio.current_time()
        while True:
            data = None
            with trio.move_on_at(min(next_report, last_read + idle_s)):
                data = await stream.receive_some(RECEIVE_BYTES)
            if data is not None:
                if not data:
                    raise trio.BrokenResourceError("the master closed the connection")
                last_read = trio.current_time()
                for frame in decoder.feed(data):
                    if frame.data:
                        await store.replica.append_at(frame.offset, frame.data)
                    self.master_offset = frame.offset + len(frame.data)
            now = trio.current_time()
            if now - last_read >= idle_s:
                raise trio.BrokenResourceError(f"nothing from the master for {idle_s:g} s")
            if store.written_offset > self.reported_offset or now >= next_report:
                await self._report(stream)
                next_report = now + heartbeat_s

    async def _report(self, stream: trio.SocketStream) -> None:
        offset = self.store.written_offset
        await stream.send_all(encode_report(offset))
        self.reported_offset = offset


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
