"""`ReadBudget`: the bytes every connection holds in partial frames, together, at most a limit.

A frame's length comes first and its bytes may follow slowly: a peer (or thousands of them) can
announce frames of `max_frame_length` and trickle them, and each connection's decoder would hold
up to that much. The connections report what their decoders hold after every receive; when the
total passes `max_buffered_bytes`, the connection holding the most is stopped (closed after its
running requests), one `read_budget_exceeded` event each, so memory is bounded by configuration
and the connections that send whole frames go on. Knows nothing of sockets: a stop is a callback.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

log = structlog.get_logger()

#: stops a connection; the argument is the reason it closes with
Stop = Callable[[str], None]


class ReadBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self.stopped = 0  # connections stopped to keep within the limit
        self._held: dict[int, tuple[int, Stop]] = {}

    def update(self, key: int, buffered: int, stop: Stop) -> None:
        """Connection `key` now holds `buffered` bytes of partial frames."""
        held = self._held.pop(key, None)
        if held is not None:
            self.total -= held[0]
        if buffered:
            self._held[key] = (buffered, stop)
            self.total += buffered
        while self.total > self.limit and self._held:
            largest = max(self._held, key=lambda k: self._held[k][0])
            size, stop_largest = self._held.pop(largest)
            self.total -= size
            self.stopped += 1
            log.warning("read_budget_exceeded", conn_id=largest, held=size, limit=self.limit)
            stop_largest("read_budget")

    def release(self, key: int) -> None:
        """Connection `key` is done reading."""
        held = self._held.pop(key, None)
        if held is not None:
            self.total -= held[0]
