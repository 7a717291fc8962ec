"""`NamesrvConfig`: everything a standalone name server needs, validated once, passed down.

Field names are snake_case of RocketMQ 4.9's `NamesrvConfig` and `NettyServerConfig` where
those have one (`kv_config_path`, `order_message_enable`); the rest are this project's bounds.
Every table the name server keeps is bounded here, never by what peers send: brokers, topics
per registration, the size of a registration body, KV entries. Built by the CLI from flags;
tests use `dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Final

#: 4.9's `RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME`
BROKER_EXPIRED_S: Final = 120.0
#: 4.9's `scanNotActiveBroker` period
SCAN_INTERVAL_S: Final = 10.0


class NamesrvConfigError(ValueError):
    """A configuration value that cannot be used; `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def default_kv_config_path() -> str:
    """4.9's default: `~/namesrv/kvConfig.json`."""
    return os.path.join(os.path.expanduser("~"), "namesrv", "kvConfig.json")


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    """The name server's settings; `NamesrvConfigError` names the first unusable one."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 9876
    kv_config_path: str = dataclasses.field(default_factory=default_kv_config_path)
    #: answer GET_ROUTEINFO_BY_TOPIC with the topic's ORDER_TOPIC_CONFIG entry (4.9's flag)
    order_message_enable: bool = False
    #: a broker not registered again within this many seconds leaves the routes
    broker_expired_s: float = BROKER_EXPIRED_S
    #: how often brokers past `broker_expired_s` are looked for
    scan_interval_s: float = SCAN_INTERVAL_S
    #: broker addresses (masters and slaves) the route table holds at most
    max_brokers: int = 1024
    #: topics one registration may carry
    max_topics_per_registration: int = 100_000
    #: bytes of a registration body, inflated when it comes compressed
    max_register_body_bytes: int = 64 * 1024 * 1024
    #: (namespace, key) pairs the KV config holds at most
    max_kv_entries: int = 100_000
    #: characters of a KV namespace, key or value
    max_kv_field_length: int = 64 * 1024
    max_connections: int = 10_000
    #: a connection with nothing received for this long is closed (4.9's channel idle time)
    idle_timeout_s: float = 120.0
    write_timeout_s: float = 30.0
    shutdown_timeout_s: float = 10.0
    max_frame_length: int = 16 * 1024 * 1024
    log_level: str = "info"

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise NamesrvConfigError("listen", f"port {self.listen_port} is out of range")
        if not self.kv_config_path:
            raise NamesrvConfigError("kv_config_path", "is empty")
        for key in (
            "broker_expired_s",
            "scan_interval_s",
            "idle_timeout_s",
            "write_timeout_s",
            "shutdown_timeout_s",
        ):
            value = getattr(self, key)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise NamesrvConfigError(key, f"{value!r} is not a positive number of seconds")
        for key in (
            "max_brokers",
            "max_topics_per_registration",
            "max_register_body_bytes",
            "max_kv_entries",
            "max_kv_field_length",
            "max_connections",
            "max_frame_length",
        ):
            value = getattr(self, key)
            if not (isinstance(value, int) and value > 0):
                raise NamesrvConfigError(key, f"{value!r} is not a positive integer")
        if self.log_level.lower() not in {"debug", "info", "warning", "error"}:
            raise NamesrvConfigError("log_level", f"{self.log_level!r} is not a log level")
