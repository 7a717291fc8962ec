"""The receives a client holds, so that its NotifyClientTermination answers them at once.

A long-polling ReceiveMessage is held until a message arrives or its polling time (up to 30 s)
passes. A client that says it terminates while one of its receives is held (a SimpleConsumer
receiving on another thread, say) would otherwise have the next message that arrives popped for
it: handed to a client that is going away, and hidden from the group's other consumers for its
invisible duration. A termination ends the waiting of every receive that client holds on the
same connection: each is answered as one that found nothing (MESSAGE_NOT_FOUND). A pop already
under way is not interrupted, so what it took is still delivered. Keyed by connection and
client id, so a peer can only end its own receives; an entry lives as long as its receive, so
the table is bounded by the receives the server holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import structlog
import trio

from broker.grpc.renew import table_of
from broker.pop.service import PopService

log = structlog.get_logger()

Key = tuple[int, str]


class HeldReceives:
    def __init__(self) -> None:
        #: (connection id, client id) -> the stop event of each receive it holds
        self.held: dict[Key, set[trio.Event]] = {}

    @contextmanager
    def hold(self, conn_id: int, client_id: str) -> Iterator[trio.Event]:
        """An event set when the client terminates, for as long as the block runs."""
        stop = trio.Event()
        if not client_id:  # no client id: nobody can end it
            yield stop
            return
        key = (conn_id, client_id)
        events = self.held.setdefault(key, set())
        events.add(stop)
        try:
            yield stop
        finally:
            events.discard(stop)
            if not events and self.held.get(key) is events:
                del self.held[key]

    def end(self, conn_id: int, client_id: str) -> int:
        """Stop the waiting of the receives `client_id` holds on `conn_id`; how many."""
        events = self.held.pop((conn_id, client_id), set())
        for stop in events:
            stop.set()
        if events:
            log.info("grpc_receives_ended", client_id=client_id, receives=len(events))
        return len(events)


def held_receives(pop: PopService) -> HeldReceives:
    """The one table of held receives of the broker `pop` serves."""
    return table_of(pop, HeldReceives)
