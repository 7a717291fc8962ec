"""How fast each group consumes each topic: the committed offsets' advance per second.

4.9 answers GET_CONSUME_STATS' `consumeTps` from its per-minute `GROUP_GET_NUMS` statistic
(messages pulled). Here the figure is the advance of the group's committed offsets over the
last `WINDOW_S` seconds, which counts what was consumed rather than fetched, and needs no hook
on the pull path. Counts are kept per whole second, at most `WINDOW_S` of them per key; the keys
are those of the offset table (a key read after a silent window is dropped).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final

WINDOW_S: Final = 60


class ConsumeRates:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: key -> (whole second, count) pairs, oldest first
        self._counts: dict[str, deque[tuple[int, int]]] = {}

    def note(self, key: str, count: int) -> None:
        """`count` more messages of `key` (`topic@group`) were consumed now."""
        if count <= 0:
            return
        second = int(self._clock())
        counts = self._counts.setdefault(key, deque())
        if counts and counts[-1][0] == second:
            counts[-1] = (second, counts[-1][1] + count)
        else:
            counts.append((second, count))
        self._trim(counts, second)

    def tps(self, key: str) -> float:
        """Messages per second of `key` over the last `WINDOW_S` seconds."""
        counts = self._counts.get(key)
        if counts is None:
            return 0.0
        self._trim(counts, int(self._clock()))
        if not counts:
            del self._counts[key]
            return 0.0
        return sum(n for _, n in counts) / WINDOW_S

    @staticmethod
    def _trim(counts: deque[tuple[int, int]], second: int) -> None:
        while counts and counts[0][0] <= second - WINDOW_S:
            counts.popleft()
