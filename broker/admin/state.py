"""What the admin requests keep between calls: get counts, TPS samples, the name-server role's
write-permission switch and hidden routes, and the configuration's data version.

`RuntimeStats` is the broker's one rate mechanism. It samples the put and get counts once a
second (RocketMQ's `StoreStatsService` does the same) and keeps ten minutes of samples, so
GET_BROKER_RUNTIME_INFO can give the TPS over the last 10 s, 1 min and 10 min as 4.9 does
(`"12.5 11.0 9.75"`; a window not yet covered is empty text). With them it samples two
per-key counts for `KEY_WINDOW_S`: messages stored per topic (the send rate of a topic) and
messages consumed per `topic@group` (committed offsets' advance: GET_CONSUME_STATS'
`consumeTps`); a key's rate is measured from the sample that opens the window to the count now, so
a rate moves as soon as the count does. It also keeps the day's totals for
`msgPutTotalTodayMorning` and the like: the count when the local day (and the day before)
began, while the broker ran. Nothing here does I/O; `RuntimeStats.run` is a task the server
starts.
"""

from __future__ import annotations

import collections
import datetime
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import trio

from broker.topic_config import PERM_WRITE, DataVersion, TopicConfig

#: seconds between samples, and the windows reported (RocketMQ's)
SAMPLE_INTERVAL_S: Final = 1.0
TPS_WINDOWS: Final = (10, 60, 600)
#: seconds of per-topic and per-group counts kept (4.9's consumeTps is a per-minute figure)
KEY_WINDOW_S: Final = 60

Counts = Callable[[], Mapping[str, int]]


def _no_counts() -> Mapping[str, int]:
    return {}


@dataclass(slots=True)
class Sample:
    at: float  # monotonic seconds
    puts: int
    get_found: int
    get_miss: int
    transferred: int


@dataclass(slots=True)
class KeySample:
    at: float  # monotonic seconds
    topic_puts: dict[str, int]  # topic -> messages stored
    consumed: dict[str, int]  # `topic@group` -> messages consumed


@dataclass(frozen=True, slots=True)
class KeyRates:
    """Per-key rates from the sample that opens a window (`first`) to the counts now, over
    at least a sample interval; 0.0 for every key before any sample."""

    topic_puts: Mapping[str, int]
    consumed: Mapping[str, int]
    first: KeySample
    elapsed: float

    def topic_tps(self, topic: str) -> float:
        then = self.first.topic_puts.get(topic, 0)
        return max(0, self.topic_puts.get(topic, 0) - then) / self.elapsed

    def consume_tps(self, key: str) -> float:
        then = self.first.consumed.get(key, 0)
        return max(0, self.consumed.get(key, 0) - then) / self.elapsed


class RuntimeStats:
    """Get counts (the pull path adds to them) and the samples TPS figures come from."""

    def __init__(
        self,
        puts: Callable[[], int] = lambda: 0,
        topic_puts: Counts = _no_counts,
        consumed: Counts = _no_counts,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: total messages stored so far (the store's own count)
        self.puts = puts
        #: messages stored so far per topic, and consumed so far per `topic@group`
        self.topic_puts = topic_puts
        self.consumed = consumed
        self._clock = clock
        self.key_samples: collections.deque[KeySample] = collections.deque(maxlen=KEY_WINDOW_S + 1)
        self.get_found = 0  # pulls that returned messages
        self.get_miss = 0  # pulls that found none
        self.transferred = 0  # messages returned by pulls
        self.boot_ms = int(time.time() * 1000)
        self.samples: collections.deque[Sample] = collections.deque(maxlen=TPS_WINDOWS[-1] + 1)
        self._day = datetime.date.today()
        #: (puts, gets) when yesterday and today began; the boot counts (0) until a midnight
        self.yesterday_morning = (0, 0)
        self.today_morning = (0, 0)

    def record_get(self, messages: int) -> None:
        if messages:
            self.get_found += 1
            self.transferred += messages
        else:
            self.get_miss += 1

    def sample(self, now: float | None = None) -> None:
        """Take one sample; at the first sample of a new day, roll the day's totals."""
        at = self._clock() if now is None else now
        puts = self.puts()
        self.samples.append(Sample(at, puts, self.get_found, self.get_miss, self.transferred))
        self.key_samples.append(KeySample(at, dict(self.topic_puts()), dict(self.consumed())))
        today = datetime.date.today()
        if today != self._day:
            self._day = today
            self.yesterday_morning = self.today_morning
            self.today_morning = (puts, self.transferred)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.sample()
        task_status.started()
        while True:
            await trio.sleep(SAMPLE_INTERVAL_S)
            self.sample()

    def tps(self, pick: Callable[[Sample], int]) -> str:
        """Three rates, over 10 s, 1 min and 10 min, space-separated (4.9's form)."""
        return " ".join(self._rate(window, pick) for window in TPS_WINDOWS)

    def _rate(self, window: int, pick: Callable[[Sample], int]) -> str:
        if len(self.samples) <= window:
            return ""
        first, last = self.samples[-window - 1], self.samples[-1]
        elapsed = last.at - first.at
        return repr(round((pick(last) - pick(first)) / elapsed, 2)) if elapsed > 0 else "0.0"

    def key_rates(self, window: float = KEY_WINDOW_S) -> KeyRates:
        """The per-key rates over the last `window` seconds, as of now: take them once and
        read them for many keys (each read of the counts copies a table)."""
        now = self._clock()
        first = next((s for s in self.key_samples if s.at >= now - window), None)
        if first is None:
            return KeyRates({}, {}, KeySample(now, {}, {}), SAMPLE_INTERVAL_S)
        elapsed = max(now - first.at, SAMPLE_INTERVAL_S)  # a just-taken sample: no spike
        return KeyRates(self.topic_puts(), self.consumed(), first, elapsed)

    def topic_tps(self, topic: str, window: float = KEY_WINDOW_S) -> float:
        """Messages stored per second in `topic` over the last `window` seconds."""
        return self.key_rates(window).topic_tps(topic)

    def consume_tps(self, key: str, window: float = KEY_WINDOW_S) -> float:
        """Messages consumed per second of `key` (`topic@group`) over the last `window` s."""
        return self.key_rates(window).consume_tps(key)

    def total_tps(self, window: int) -> float:
        """Found plus missed pulls per second over the last `window` samples (0 if too few)."""
        if len(self.samples) <= window:
            return 0.0
        first, last = self.samples[-window - 1], self.samples[-1]
        elapsed = last.at - first.at
        gets = last.get_found + last.get_miss - first.get_found - first.get_miss
        return gets / elapsed if elapsed > 0 else 0.0


@dataclass(slots=True)
class AdminState:
    """State of the admin requests, one per broker (`BrokerContext.admin`)."""

    stats: RuntimeStats = field(default_factory=RuntimeStats)
    #: the configuration's data version (GET_BROKER_CONFIG's `version` header)
    config_version: DataVersion = field(default_factory=DataVersion)
    #: WIPE_WRITE_PERM_OF_BROKER: the name-server role announces every topic read-only
    write_wiped: bool = False
    #: delay level -> next logical offset to deliver (the schedule service's, set at start)
    schedule_offsets: Callable[[], dict[int, int]] = field(default=dict)
    #: serialises UPDATE_BROKER_CONFIG (the saved file is read, merged and written)
    config_lock: trio.Lock = field(default_factory=trio.Lock)
    #: DELETE_TOPIC_IN_NAMESRV: topic -> the config it had; its route stays hidden until the
    #: broker's table holds another config for it (an update or a re-creation)
    hidden_routes: dict[str, TopicConfig] = field(default_factory=dict)

    def broker_permission(self, configured: int) -> int:
        """The permission the broker has now: the configured one, without WRITE while
        WIPE_WRITE_PERM_OF_BROKER holds (ADD_WRITE_PERM_OF_BROKER gives it back)."""
        return configured & ~PERM_WRITE if self.write_wiped else configured

    def route_hidden(self, topic: str, config: TopicConfig | None) -> bool:
        hidden = self.hidden_routes.get(topic)
        if hidden is None:
            return False
        if config is hidden:
            return True
        del self.hidden_routes[topic]  # the broker changed the topic: it registers it anew
        return False
