"""The accept loop every listener of the broker runs (remoting, gRPC).

Out of descriptors or memory (EMFILE, ENFILE, ENOMEM, ENOBUFS), accepting is retried every
`ACCEPT_RETRY_S` while the connection waits in the kernel's backlog, instead of ending the
listener: one `<prefix>accept_failed` event per spell, `<prefix>accept_resumed` when a
connection is accepted again. Any other error is the listener's end and is raised.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from typing import Final

import structlog
import trio

log = structlog.get_logger()

ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S: Final = 0.1


async def accept_forever(
    listener: trio.SocketListener,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    nursery: trio.Nursery,
    *,
    connections: Callable[[], int],
    prefix: str = "",
) -> None:
    """Accept connections on `listener` for ever, each handled by `handler` in `nursery`;
    `connections()` (how many are open) goes into the events of a spell."""
    failed = 0
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                raise
            if not failed:
                log.warning(
                    f"{prefix}accept_failed",
                    error=errno.errorcode.get(exc.errno or 0, str(exc.errno)),
                    connections=connections(),
                    retry_s=ACCEPT_RETRY_S,
                )
            failed += 1
            await trio.sleep(ACCEPT_RETRY_S)
            continue
        if failed:
            log.info(f"{prefix}accept_resumed", attempts=failed, connections=connections())
            failed = 0
        nursery.start_soon(handler, stream)
