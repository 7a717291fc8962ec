"""The broker's configuration: one frozen `BrokerConfig`, holding the store's `MessageStoreConfig`.

Built once, in this order, each layer overriding the one before: embedded defaults < a TOML file
< `RMQ_`-prefixed environment variables < command-line flags. Keys are RocketMQ's configuration
names in snake_case (`broker_name`, `mapped_file_size_commit_log`, ...), all in one flat
namespace: a key that names a `MessageStoreConfig` field goes to the store, any other must be a
`BrokerConfig` field. `listen` and the other `*_listen` keys take `HOST:PORT`.

This is the only module that reads `os.environ`. A bad value raises `ConfigError` naming the key;
the CLI prints it on one line and exits without a traceback.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from broker.config_values import check_number, coerce
from broker.tls import TlsClientAuth, TlsMode
from store.config import MessageStoreConfig

ENV_PREFIX: Final = "RMQ_"
#: environment variable naming the TOML file when `--config` is not given
CONFIG_FILE_ENV: Final = "RMQ_CONFIG"
_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::", "*"})
#: `RMQ_` variables that are not configuration keys: the TOML file's name and the switches of the
#: project's own test and container tooling, which the brokers those tools start inherit
NOT_CONFIG_ENV: Final = frozenset(
    {
        CONFIG_FILE_ENV,
        "RMQ_SOAK",
        "RMQ_CONTAINER_TEST",
        "RMQ_CONTAINER_TEST_SPARK",
        "RMQ_CONTAINER_TEST_COMPOSE",
        "RMQ_CONTAINER_CACHE",
        "RMQ_CONTAINER_KEEP",
    }
)
#: how `namesrv_listen`, `metrics_listen` and `grpc_listen` are switched off
_OFF: Final = frozenset({"", "none"})


class ConfigError(ValueError):
    """A configuration value that cannot be used; `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    @classmethod
    def parse(cls, key: str, text: str) -> HostPort:
        """`HOST:PORT`, `[V6]:PORT`, `V6:PORT` (RocketMQ's form: the port follows the last colon)
        or `:PORT` (all interfaces); `ConfigError` otherwise."""
        host, sep, port_text = text.strip().rpartition(":")
        if not sep or not (port_text.isascii() and port_text.isdigit()):
            raise ConfigError(key, f"expected HOST:PORT, got {text!r}")
        port = int(port_text)
        if port > 65535:
            raise ConfigError(key, f"port {port} is out of range")
        if host.startswith("[") or host.endswith("]"):
            host = host[1:-1] if host.startswith("[") and host.endswith("]") else ""
            if not _is_ipv6(host):
                raise ConfigError(key, f"brackets hold an IPv6 address, got {text!r}")
        elif ":" in host and not _is_ipv6(host):
            # a host name has no colon: a stray one is a typo, not a name to resolve
            raise ConfigError(key, f"expected HOST:PORT, got {text!r}")
        if any(c.isspace() for c in host):
            raise ConfigError(key, f"a host has no spaces, got {text!r}")
        return cls(host or "0.0.0.0", port)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything the daemon needs; validated on construction (`ConfigError`)."""

    store: MessageStoreConfig = field(default_factory=MessageStoreConfig)
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    #: 0 is the master of its broker name; a slave (> 0) registers, but its topics are not routed
    broker_id: int = 0
    #: the name servers to register with, `;`-separated HOST:PORT (RocketMQ's namesrvAddr); ""
    #: leaves the broker its own name server, alone in its cluster
    namesrv_addr: str = ""
    #: ms between two registrations with every name server (registerNameServerPeriod)
    register_name_server_period: int = 30_000
    #: ms a registration may take before that name server's connection counts as lost
    register_broker_timeout_mills: int = 6_000
    #: the address written as store host and handed out in routes; "" derives it from `listen`
    broker_ip1: str = ""
    listen: HostPort = HostPort("0.0.0.0", 10911)
    namesrv_listen: HostPort | None = None
    metrics_listen: HostPort | None = None
    # the RocketMQ 5 gRPC endpoint (5.x proxy's port), calls per connection, header block bytes
    grpc_listen: HostPort | None = HostPort("127.0.0.1", 8081)
    grpc_max_concurrent_streams: int = 100
    grpc_max_header_list_size: int = 16 * 1024
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    #: auto-creation stops once the topic (group) table holds this many; existing ones serve on
    auto_create_topic_max_num: int = 10_000
    auto_create_subscription_group_max_num: int = 10_000
    reject_transaction_message: bool = False
    #: ms a half message waits for its END_TRANSACTION before its producer is asked
    transaction_time_out: int = 6_000
    #: checks of one half message before it is given up (stored in TRANS_CHECK_MAX_TIME_TOPIC)
    transaction_check_max: int = 15
    #: ms between two rounds of the transaction check
    transaction_check_interval: int = 60_000
    #: PERM_READ (4) | PERM_WRITE (2): without WRITE the routes say read-only and sends to
    #: order topics are refused (RocketMQ's brokerPermission, for draining a broker)
    broker_permission: int = 6
    #: epoch milliseconds before which every send is refused (RocketMQ's
    #: startAcceptSendRequestTimeStamp); 0 accepts at once
    start_accept_send_request_time_stamp: int = 0
    default_topic_queue_nums: int = 8
    #: ms after its last renewal that an orderly consumer's queue lock expires
    rebalance_lock_max_live_time: int = 60_000
    #: how often changed consumer offsets are written to config/consumerOffset.json
    flush_consumer_offset_interval_ms: int = 5000
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    max_inflight_per_connection: int = 256
    max_connections: int = 10_000  # more are closed as soon as they are accepted
    idle_timeout_s: float = 120.0
    write_timeout_s: float = 30.0
    shutdown_timeout_s: float = 10.0
    max_frame_length: int = 16 * 1024 * 1024
    max_buffered_bytes: int = 64 * 1024 * 1024  # partial frames of all connections together
    log_level: str = "info"
    # Security (docs/security.md): RocketMQ's plain ACL and TLS modes.
    acl_enable: bool = False
    #: accounts and permissions in RocketMQ's plain_acl.yml shape, re-read when it changes
    acl_file: str = ""
    tls_mode: TlsMode = TlsMode.DISABLED
    tls_server_cert: str | None = None
    tls_server_key: str | None = None
    tls_server_key_password: str | None = field(default=None, repr=False)
    #: CA bundle that client certificates must chain to
    tls_server_ca: str | None = None
    tls_server_need_client_auth: TlsClientAuth = TlsClientAuth.NONE
    # Replication (docs/reliability.md): a master listens for slaves, a slave connects.
    #: the master's HA port; None: the listen port + 1 (any free port when that is 0)
    ha_listen_port: int | None = None
    #: where a SLAVE finds its master's HA port; None until registration tells it
    ha_master_address: HostPort | None = None
    #: where a SLAVE copies topics, groups and offsets from (the master's listen address)
    ha_master_broker_address: HostPort | None = None
    #: a consumer far behind is told to pull from a slave (4.9's slaveReadEnable, per group)
    slave_read_enable: bool = False
    #: SQL92 subscriptions (pulls, pops, gRPC receives) are served; off, refused (4.9's default)
    enable_property_filter: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            _check_number(f.name, value)
            if isinstance(value, HostPort) and not 0 <= value.port <= 65535:
                raise ConfigError(f.name, f"port {value.port} is out of range")
        positive = (
            "default_topic_queue_nums",
            "register_name_server_period",
            "register_broker_timeout_mills",
            "auto_create_topic_max_num",
            "auto_create_subscription_group_max_num",
            "flush_consumer_offset_interval_ms",
            "rebalance_lock_max_live_time",
            "transaction_time_out",
            "transaction_check_max",
            "transaction_check_interval",
            "max_inflight_per_connection",
            "max_connections",
            "grpc_max_concurrent_streams",
            "grpc_max_header_list_size",
            "idle_timeout_s",
            "write_timeout_s",
            "max_frame_length",
            "max_buffered_bytes",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(name, f"must be > 0, got {getattr(self, name)!r}")
        if self.max_buffered_bytes < self.max_frame_length:
            limit = f"max_frame_length ({self.max_frame_length})"
            raise ConfigError("max_buffered_bytes", f"must be at least {limit}")
        if not self.shutdown_timeout_s >= 0:
            raise ConfigError("shutdown_timeout_s", "must be >= 0")
        if (perm := self.broker_permission) not in range(8):
            raise ConfigError("broker_permission", f"must be within 0..7, got {perm!r}")
        if self.ha_listen_port is not None and not 0 <= self.ha_listen_port <= 65535:
            raise ConfigError("ha_listen_port", f"port {self.ha_listen_port} is out of range")
        if self.start_accept_send_request_time_stamp < 0:
            raise ConfigError("start_accept_send_request_time_stamp", "must be >= 0")
        if not self.broker_name or not self.broker_cluster_name:
            raise ConfigError("broker_name", "broker and cluster names must not be empty")
        if any(c < " " or c == "\x7f" for c in self.broker_cluster_name):
            # every message carries it as its CLUSTER property, whose separators are \x01, \x02
            raise ConfigError("broker_cluster_name", "must not contain control characters")
        if self.broker_id < 0:
            raise ConfigError("broker_id", f"must be >= 0, got {self.broker_id}")
        self.namesrv_addrs  # noqa: B018 (parsed here so that a bad list stops the start)
        if self.log_level.lower() not in {"debug", "info", "warning", "error"}:
            raise ConfigError("log_level", f"unknown level {self.log_level!r}")
        self._check_store_host()
        self._check_security()

    def _check_store_host(self) -> None:
        """Every record carries the store host as a 4- or 16-byte address, and routes send
        clients to it: it must be an IP address, and not the unspecified one."""
        if self.broker_ip1:
            address = _ip(self.broker_ip1)
            if address is None:
                raise ConfigError(
                    "broker_ip1", f"expected an IPv4 or IPv6 address, got {self.broker_ip1!r}"
                )
            if address.is_unspecified:
                raise ConfigError(
                    "broker_ip1",
                    f"{self.broker_ip1} is no address a client can connect to: give the address "
                    "producers reach this broker at",
                )
        elif _ip(self.store_host_ip) is None:
            raise ConfigError(
                "broker_ip1",
                f"the listen host {self.listen.host!r} is not an IP address: set broker_ip1 to "
                "the address producers reach this broker at",
            )

    def _check_security(self) -> None:
        if self.acl_enable and not self.acl_file:
            raise ConfigError("acl_file", "acl_enable needs the path of the ACL file")
        tls_on = self.tls_mode is not TlsMode.DISABLED
        if tls_on and not (self.tls_server_cert and self.tls_server_key):
            raise ConfigError("tls_mode", f"{self.tls_mode.value} needs tls_server_cert and _key")
        if self.tls_server_need_client_auth is not TlsClientAuth.NONE and not self.tls_server_ca:
            raise ConfigError("tls_server_ca", "checking client certificates needs a CA file")

    @property
    def namesrv_addrs(self) -> tuple[HostPort, ...]:
        """`namesrv_addr` parsed: each HOST:PORT once, in the order given; `ConfigError` for a
        part that is not one or names no host a broker could connect to."""
        addrs: list[HostPort] = []
        for part in self.namesrv_addr.split(";"):
            if not part.strip():
                continue
            addr = HostPort.parse("namesrv_addr", part)
            if addr.host in _WILDCARDS or not part.strip().rpartition(":")[0]:
                raise ConfigError("namesrv_addr", f"{part.strip()!r} names no host to connect to")
            if addr not in addrs:
                addrs.append(addr)
        return tuple(addrs)

    @property
    def store_host_ip(self) -> str:
        """broker_ip1, or the listen address when that is a concrete one, else loopback: ::1 for
        `::`, which listens on IPv6 only, 127.0.0.1 for the other wildcards."""
        if self.broker_ip1:
            return self.broker_ip1
        if self.listen.host == "::":
            return "::1"
        return "127.0.0.1" if self.listen.host in _WILDCARDS else self.listen.host


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


_BROKER_FIELDS: Final = {f.name for f in dataclasses.fields(BrokerConfig)} - {"store"}
_STORE_FIELDS: Final = {f.name for f in dataclasses.fields(MessageStoreConfig)}
_HOST_PORT_KEYS: Final = frozenset(
    {"listen", "namesrv_listen", "metrics_listen", "grpc_listen"}
    | {"ha_master_address", "ha_master_broker_address"}
)


def load_config(
    config_file: str | None = None,
    flags: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """The configuration from defaults < `config_file` (or $RMQ_CONFIG) < RMQ_* env < `flags`.

    `flags` holds only what the user gave (None values are ignored). Raises `ConfigError`.
    """
    env = os.environ if environ is None else environ
    raw: dict[str, object] = {}
    path = config_file or env.get(CONFIG_FILE_ENV)
    if path:
        raw.update(_read_toml(path))
    raw.update(_from_env(env))
    raw.update({k: v for k, v in (flags or {}).items() if v is not None})
    return build_config(raw)


def build_config(raw: Mapping[str, object]) -> BrokerConfig:
    """A `BrokerConfig` from flat keys (strings are parsed by the field's type)."""
    broker_values: dict[str, Any] = {}
    store_values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _HOST_PORT_KEYS:
            off = value is None or (isinstance(value, str) and value.strip().lower() in _OFF)
            broker_values[key] = None if off else HostPort.parse(key, str(value))
        elif key in _BROKER_FIELDS:
            broker_values[key] = _coerce(key, value, _BROKER_HINTS[key])
        elif key in _STORE_FIELDS:
            store_values[key] = _coerce(key, value, _STORE_HINTS[key])
        else:
            raise ConfigError(key, "unknown configuration key")
    try:
        store = MessageStoreConfig(**store_values)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(_key_in(str(exc), store_values), str(exc)) from None
    return BrokerConfig(store=store, **broker_values)


def _key_in(message: str, values: Mapping[str, object]) -> str:
    """The key a store validation message names (the store raises plain ValueErrors)."""
    return next((key for key in values if key in message), "store")


def _read_toml(path: str) -> dict[str, object]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("config", f"{path} is not valid TOML: not UTF-8 ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", f"{path} is not valid TOML: {exc}") from None
    except RecursionError:
        # tomllib parses arrays and inline tables recursively
        raise ConfigError("config", f"{path} is not valid TOML: nested too deep") from None
    flat: dict[str, object] = {}
    for key, value in data.items():
        # Tables ([broker], [store]) are only grouping: their keys share the flat namespace.
        if isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    return flat


def _from_env(environ: Mapping[str, str]) -> dict[str, object]:
    known = _BROKER_FIELDS | _STORE_FIELDS
    result: dict[str, object] = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and name not in NOT_CONFIG_ENV:
            key = name[len(ENV_PREFIX) :].lower()
            if key not in known:
                raise ConfigError(name, "unknown configuration variable")
            result[key] = value
    return result


def _coerce(key: str, value: object, hint: Any) -> object:
    """`value` as the field's type; strings (env, flags) are parsed, TOML values checked."""
    try:
        return coerce(value, hint)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


def _check_number(key: str, value: object) -> None:
    try:
        check_number(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


_BROKER_HINTS: Final = typing.get_type_hints(BrokerConfig)
_STORE_HINTS: Final = typing.get_type_hints(MessageStoreConfig)
