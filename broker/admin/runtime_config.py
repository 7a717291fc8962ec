"""The broker's configuration over the wire: GET_BROKER_CONFIG's text and UPDATE_BROKER_CONFIG's
changes, and the file that makes those changes survive a restart.

On the wire keys are RocketMQ's camelCase names (`brokerPermission`); snake_case (ours) is
accepted too. Only `RUNTIME_KEYS` may change while the broker runs: each is read afresh by
every request (or every round) that uses it, so a new value takes effect at once. Any other
key, or a value the configuration's own checks refuse, refuses the whole update (nothing
applied) with a remark naming the key.

An accepted change is written to `<store root>/config/broker_runtime.json`
(`{"dataVersion": ..., "overrides": {key: text}}`, written atomically like the topic table);
`apply_saved` lays those values over the configuration the broker starts with (file,
environment and flags), so the last change an operator made is what a restart keeps. The
startup log names each key so applied.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import structlog
import trio

from broker.config import BrokerConfig, ConfigError
from broker.config_values import coerce
from broker.topic_config import DataVersion, write_json_atomically
from protocol.errors import HeaderFieldError
from store.config import MessageStoreConfig

log = structlog.get_logger()

#: keys every request reads afresh: they may change while the broker runs
RUNTIME_KEYS: Final = frozenset(
    {
        "broker_permission",
        "start_accept_send_request_time_stamp",
        "reject_transaction_message",
        "transaction_time_out",
        "transaction_check_max",
        "transaction_check_interval",
        "max_connections",
        "trace_on",
        "region_id",
    }
)
#: keys never shown (GET_BROKER_CONFIG answers any account ACL lets in)
SECRET_KEYS: Final = frozenset({"tls_server_key_password"})
RUNTIME_FILE: Final = "broker_runtime.json"
_WIRE_EXCEPTIONS: Final = {"broker_ip1": "brokerIP1"}
_SNAKE_EXCEPTIONS: Final = {wire: snake for snake, wire in _WIRE_EXCEPTIONS.items()}
_BROKER_FIELDS: Final = {f.name for f in dataclasses.fields(BrokerConfig)} - {"store"}
_STORE_FIELDS: Final = {f.name for f in dataclasses.fields(MessageStoreConfig)}
_HINTS: Final = typing.get_type_hints(BrokerConfig) | typing.get_type_hints(MessageStoreConfig)


def wire_key(key: str) -> str:
    """`broker_permission` -> `brokerPermission`."""
    return _WIRE_EXCEPTIONS.get(key) or re.sub(r"_([a-z0-9])", lambda m: m[1].upper(), key)


def snake_key(key: str) -> str:
    """`brokerPermission` (or `broker_permission`) -> `broker_permission`."""
    return _SNAKE_EXCEPTIONS.get(key) or re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def value_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.name)
    return str(value)


def config_properties(config: BrokerConfig) -> dict[str, str]:
    """Every key with a value, camelCase, as text (GET_BROKER_CONFIG), secrets left out."""
    values: dict[str, object] = {}
    for name in sorted(_BROKER_FIELDS | _STORE_FIELDS):
        if name in SECRET_KEYS:
            continue
        source: object = config if name in _BROKER_FIELDS else config.store
        value = getattr(source, name)
        if value is not None:
            values[wire_key(name)] = value
    return {key: value_text(value) for key, value in values.items()}


def updated(
    config: BrokerConfig, changes: Mapping[str, str]
) -> tuple[BrokerConfig, dict[str, str]]:
    """`config` with `changes` (wire keys -> text) applied, and the changes by snake_case key;
    `HeaderFieldError` naming the first key that may not change or whose value is refused."""
    by_key: dict[str, str] = {}
    for wire, text in changes.items():
        key = snake_key(wire)
        if key not in _BROKER_FIELDS and key not in _STORE_FIELDS:
            raise HeaderFieldError("body", f"updateBrokerConfig: unknown configuration key {wire}")
        if key not in RUNTIME_KEYS:
            shown = ", ".join(sorted(wire_key(k) for k in RUNTIME_KEYS))
            raise HeaderFieldError(
                "body",
                f"updateBrokerConfig: {wire} cannot change while the broker runs (set it in the "
                f"configuration file and restart); these can: {shown}",
            )
        by_key[key] = text
    return with_values(config, by_key), by_key


def with_values(config: BrokerConfig, values: Mapping[str, str]) -> BrokerConfig:
    """`config` with snake_case keys set from text; `HeaderFieldError` for a refused value."""
    broker: dict[str, Any] = {}
    store: dict[str, Any] = {}
    try:
        for key, text in values.items():
            try:
                value = coerce(text, _HINTS[key])
            except ValueError as exc:
                raise ConfigError(key, str(exc)) from None
            (store if key in _STORE_FIELDS else broker)[key] = value
        new_store = dataclasses.replace(config.store, **store) if store else config.store
        return dataclasses.replace(config, store=new_store, **broker)
    except ConfigError as exc:
        raise HeaderFieldError("body", f"updateBrokerConfig: {wire_key(exc.key)}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise HeaderFieldError("body", f"updateBrokerConfig: {exc}") from None


def runtime_file(config: BrokerConfig) -> Path:
    return Path(config.store.store_path_root_dir) / "config" / RUNTIME_FILE


def read_saved(path: Path) -> tuple[dict[str, str], int]:
    """The saved changes and their data version counter; ({}, 0) when there is no file.
    Raises `ConfigError` for a file that cannot be used (the broker does not start)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        overrides = data["overrides"]
        counter = int(data.get("dataVersion", {}).get("counter", 0))
    except FileNotFoundError:
        return {}, 0
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(RUNTIME_FILE, f"{path} cannot be read: {exc}") from None
    if not isinstance(overrides, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in overrides.items()
    ):
        raise ConfigError(RUNTIME_FILE, f"{path}: overrides must map keys to text")
    return overrides, counter


def apply_saved(config: BrokerConfig) -> tuple[BrokerConfig, DataVersion]:
    """`config` with the saved run-time changes laid over it, and their data version."""
    path = runtime_file(config)
    overrides, counter = read_saved(path)
    version = DataVersion()
    version.counter = counter
    unknown = sorted(set(overrides) - RUNTIME_KEYS)
    if unknown:
        raise ConfigError(RUNTIME_FILE, f"{path}: not run-time keys: {', '.join(unknown)}")
    if not overrides:
        return config, version
    try:
        changed = with_values(config, overrides)
    except HeaderFieldError as exc:
        raise ConfigError(RUNTIME_FILE, f"{path}: {exc}") from None
    for key, text in sorted(overrides.items()):
        given = value_text(getattr(config.store if key in _STORE_FIELDS else config, key))
        log.info("config_runtime_override", key=key, value=text, configured=given)
    return changed, version


async def save(path: Path, changes: Mapping[str, str], version: DataVersion) -> None:
    """Merge `changes` into the saved file (off the event loop). Raises OSError."""

    def merge() -> None:
        try:
            overrides, _ = read_saved(path)
        except ConfigError:
            overrides = {}  # an unreadable file is replaced by what is known to be good
        overrides.update(changes)
        write_json_atomically(
            path, {"dataVersion": version.to_json(), "overrides": dict(sorted(overrides.items()))}
        )

    await trio.to_thread.run_sync(merge)
