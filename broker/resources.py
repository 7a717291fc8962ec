"""Process limits the broker sets for itself at startup, and how a listener that cannot bind
is named.

Owns raising the open-files soft limit to the hard limit: a broker started from a shell or a
service manager often inherits a soft limit of 1,024 while the hard limit is far higher, and
every connection, segment and open consume-queue file takes a descriptor. What the broker uses
stays bounded by its own configuration (`max_connections`, `max_open_consume_queue_files`).
"""

from __future__ import annotations

import resource

import structlog

from broker.config import HostPort

log = structlog.get_logger()


def raise_open_files_limit() -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit; the (soft, hard) now in force. A
    refusal (a container that forbids it) keeps the old limit, with one warning event."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:
            log.warning("open_files_limit_kept", soft=soft, hard=hard, error=str(exc))
            return soft, hard
        soft = hard
    log.info("open_files_limit", soft=soft, hard=hard)
    return soft, hard


def bind_error(key: str, address: HostPort, exc: OSError) -> OSError:
    """`exc` with the listener's key and address in front, for the operator's one line."""
    error = OSError(f"{key} {address}: {exc.strerror or exc}")
    error.errno = exc.errno
    return error
