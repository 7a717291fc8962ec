"""structlog configuration of the daemon: one event per line on stderr.

JSON lines when stderr is not a terminal (containers, files, tests), `key=value` on a terminal.
Processors run in structlog's recommended order: context variables first (the connection task
binds `conn_id` and `remote`), then level, UTC timestamp and exception info. Called once, by the
CLI; library code only calls `structlog.get_logger()`.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(level: str = "info", stream: TextIO | None = None) -> None:
    """Route structlog events to `stream` (stderr by default) at `level` and above."""
    out = sys.stderr if stream is None else stream
    renderer: structlog.typing.Processor
    if out.isatty():
        renderer = structlog.processors.KeyValueRenderer(
            key_order=["timestamp", "level", "event"], drop_missing=True
        )
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
