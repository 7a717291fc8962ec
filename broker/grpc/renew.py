"""Auto renew for push consumers: messages a live client holds stay invisible.

A ReceiveMessage with `auto_renew` (what the official PushConsumer sends) hides its messages
for `RENEW_INVISIBLE_MS`. The broker notes each handed-out receipt handle under the client's
id; while the client's Telemetry stream is open, `keep` changes the invisible time of each
handle that is about to run out (through `PopService.change_invisible`, durable like a
client's own change) and remembers the new handle. The client only knows the handle it
received: an ack or a forward to the dead letter queue under it is mapped to the current one
(`current`) and ends the renewing (`forget`). When the stream ends the client's handles are
dropped unrenewed, so the messages come back once their time runs out; so do handles held
longer than `MAX_RENEW_MS`. The table is bounded: `MAX_HELD` handles in all.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Final, TypeVar, cast

import structlog
import trio

from broker.pop.checks import parse_receipt
from broker.pop.service import PopService
from protocol.errors import HeaderFieldError

log = structlog.get_logger()

_T = TypeVar("_T")

#: the invisible time of an auto-renewed receive and of each renewal, ms
RENEW_INVISIBLE_MS: Final = 60_000
#: a handle is renewed once less than this is left of its invisible time, ms
RENEW_AHEAD_MS: Final = 10_000
#: how often the held handles are looked at, s
RENEW_EVERY_S: Final = 1.0
#: renewing stops after this long in all (the message then comes back), ms
MAX_RENEW_MS: Final = 3 * 3600 * 1000
MAX_HELD: Final = 100_000


@dataclass(slots=True)
class Held:
    group: str
    topic: str
    handle: str
    since_ms: int


class Renewals:
    def __init__(self) -> None:
        #: client id -> original handle -> what is held under it
        self.held: dict[str, dict[str, Held]] = {}
        self.count = 0
        #: clients whose session is open (a `keep` runs for each): only theirs are renewed
        self.live: dict[str, int] = {}
        self.invisible_ms = RENEW_INVISIBLE_MS
        self.ahead_ms = RENEW_AHEAD_MS
        self.every_s = RENEW_EVERY_S

    def add(self, client_id: str, group: str, topic: str, handle: str, now_ms: int) -> bool:
        """Renew `handle` while `client_id`'s session lives; False when it has none (nothing
        would renew or drop it) or the table is full."""
        if client_id not in self.live or self.count >= MAX_HELD:
            if client_id in self.live:
                log.warning("grpc_renew_table_full", held=self.count, client_id=client_id)
            return False
        handles = self.held.setdefault(client_id, {})
        if handle not in handles:
            self.count += 1
        handles[handle] = Held(group, topic, handle, now_ms)
        return True

    def current(self, client_id: str, handle: str) -> str:
        """The handle that now stands for the `handle` the client received."""
        held = self.held.get(client_id, {}).get(handle)
        return handle if held is None else held.handle

    def forget(self, client_id: str, handle: str) -> None:
        handles = self.held.get(client_id)
        if handles is not None and handles.pop(handle, None) is not None:
            self.count -= 1
            if not handles:
                del self.held[client_id]

    def drop(self, client_id: str) -> None:
        """The client went away: its messages come back when their time runs out."""
        handles = self.held.pop(client_id, None)
        if handles:
            self.count -= len(handles)
            log.info("grpc_renew_dropped", client_id=client_id, handles=len(handles))

    async def keep(self, client_id: str, pop: PopService) -> None:
        """Renew `client_id`'s handles until cancelled; then drop them."""
        self.live[client_id] = self.live.get(client_id, 0) + 1
        try:
            while True:
                await trio.sleep(self.every_s)
                await self.renew_due(client_id, pop)
        finally:
            self.live[client_id] -= 1
            if not self.live[client_id]:
                del self.live[client_id]
                self.drop(client_id)

    async def renew_due(self, client_id: str, pop: PopService) -> None:
        now = pop.broker.store.now_ms()
        for original, held in list(self.held.get(client_id, {}).items()):
            receipt = parse_receipt(held.handle)
            if receipt.revive_time - now > self.ahead_ms:
                continue
            if now - held.since_ms > MAX_RENEW_MS:
                self.forget(client_id, original)
                continue
            try:
                changed = await pop.change_invisible(
                    held.group,
                    held.topic,
                    receipt.queue_id,
                    receipt.queue_offset,
                    held.handle,
                    invisible_ms=self.invisible_ms,
                )
            except HeaderFieldError as exc:  # acked or revived meanwhile: nothing to renew
                log.info("grpc_renew_gone", client_id=client_id, topic=held.topic, error=str(exc))
                self.forget(client_id, original)
                continue
            held.handle = changed.receipt


_TABLES: weakref.WeakKeyDictionary[PopService, dict[type, object]] = weakref.WeakKeyDictionary()


def table_of(pop: PopService, kind: type[_T]) -> _T:
    """The one `kind` table of the broker `pop` serves, made at its first use."""
    tables = _TABLES.setdefault(pop, {})
    found = tables.get(kind)
    if found is None:
        found = tables[kind] = kind()
    return cast(_T, found)


def renewals(pop: PopService) -> Renewals:
    """The one table of renewed handles of the broker `pop` serves."""
    return table_of(pop, Renewals)
