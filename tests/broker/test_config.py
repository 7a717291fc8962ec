"""BrokerConfig: defaults < TOML < RMQ_* environment < flags, and errors that name the key."""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest
import trio

from broker.config import (
    NOT_CONFIG_ENV,
    BrokerConfig,
    ConfigError,
    HostPort,
    build_config,
    load_config,
)
from rmq_client.producer import Message, open_producer
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.message import encode_host
from tests.conftest import make_config, start_broker

TOML = """
broker_name = "broker-toml"
listen = "127.0.0.1:20911"
flush_disk_type = "SYNC_FLUSH"
mapped_file_size_commit_log = 8192
trace_on = false

[store]
max_message_size = 2048
"""

TIMEOUTS = ("idle_timeout_s", "write_timeout_s", "shutdown_timeout_s")


def write(tmp_path: pathlib.Path, text: str) -> str:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return str(path)


def test_defaults_are_rocketmq_defaults() -> None:
    config = load_config(environ={})
    assert config.listen == HostPort("0.0.0.0", 10911)
    assert config.broker_cluster_name == "DefaultCluster"
    assert config.region_id == "DefaultRegion"
    assert config.default_topic_queue_nums == 8
    assert config.auto_create_topic_enable is True
    assert config.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.store.max_message_size == 4 * 1024 * 1024


def test_toml_overrides_defaults_and_tables_are_flat(tmp_path: pathlib.Path) -> None:
    config = load_config(write(tmp_path, TOML), environ={})
    assert config.broker_name == "broker-toml"
    assert config.listen == HostPort("127.0.0.1", 20911)
    assert config.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.store.mapped_file_size_commit_log == 8192
    assert config.store.max_message_size == 2048
    assert config.trace_on is False


def test_env_overrides_toml_and_flags_override_env(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, TOML)
    env = {
        "RMQ_BROKER_NAME": "broker-env",
        "RMQ_FLUSH_DISK_TYPE": "async_flush",
        "RMQ_MAX_MESSAGE_SIZE": "4096",
        "RMQ_BROKER_ROLE": "SLAVE",
        "RMQ_TRACE_ON": "true",
        "UNRELATED": "x",
    }
    config = load_config(path, environ=env)
    assert config.broker_name == "broker-env"
    assert config.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.store.max_message_size == 4096
    assert config.store.broker_role is BrokerRole.SLAVE
    assert config.trace_on is True
    flags = {"flush_disk_type": "SYNC_FLUSH", "listen": "[::1]:0", "broker_name": None}
    config = load_config(path, flags, environ=env)
    assert config.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.listen == HostPort("::1", 0)
    assert config.broker_name == "broker-env"  # a None flag was not given


def test_config_file_can_come_from_the_environment(tmp_path: pathlib.Path) -> None:
    config = load_config(environ={"RMQ_CONFIG": write(tmp_path, TOML)})
    assert config.broker_name == "broker-toml"


def test_namesrv_addr_is_rocketmqs_list() -> None:
    config = build_config({"namesrv_addr": " 10.0.0.1:9876; ns-2:9877;;10.0.0.1:9876;[::1]:9 "})
    assert [str(a) for a in config.namesrv_addrs] == ["10.0.0.1:9876", "ns-2:9877", "[::1]:9"]
    assert build_config({}).namesrv_addrs == ()


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"mapped_file_size_commit_log": "1000"}, "mapped_file_size_commit_log"),
        ({"max_message_size": "big"}, "max_message_size"),
        ({"flush_disk_type": "SOMETIMES"}, "flush_disk_type"),
        ({"trace_on": "maybe"}, "trace_on"),
        ({"listen": "localhost"}, "listen"),
        ({"listen": "127.0.0.1:70000"}, "listen"),
        ({"idle_timeout_s": "0"}, "idle_timeout_s"),
        ({"no_such_key": "1"}, "no_such_key"),
        ({"default_topic_queue_nums": 1.5}, "default_topic_queue_nums"),
        ({"broker_name": 7}, "broker_name"),
        ({"broker_ip1": "localhost"}, "broker_ip1"),
        ({"broker_ip1": "300.1.1.1"}, "broker_ip1"),
        ({"broker_ip1": "abc"}, "broker_ip1"),
        ({"broker_ip1": "0.0.0.0"}, "broker_ip1"),
        ({"broker_ip1": "::"}, "broker_ip1"),
        ({"listen": "localhost:10911"}, "broker_ip1"),
        ({"listen": "127.0.0.1:\u00b2"}, "listen"),
        ({"listen": "127.0.0.1:-1"}, "listen"),
        ({"listen": "[::1]"}, "listen"),
        ({"listen": "host:65536"}, "listen"),
        ({"listen": "[::1:5"}, "listen"),
        ({"listen": "::1]:5"}, "listen"),
        ({"listen": "[10.0.0.1]:5"}, "listen"),
        ({"listen": "[]:5"}, "listen"),
        ({"listen": "[[::1]]:5"}, "listen"),
        ({"listen": "10.0.0.1:5:6", "broker_ip1": "10.0.0.1"}, "listen"),
        ({"listen": "10.0.0.1:5:6"}, "listen"),
        ({"listen": "my host:5", "broker_ip1": "10.0.0.1"}, "listen"),
        ({"metrics_listen": "[127.0.0.1:5557"}, "metrics_listen"),
        ({"namesrv_listen": "127.0.0.1:9876:1"}, "namesrv_listen"),
        ({"namesrv_addr": "10.0.0.1:9876;10.0.0.2"}, "namesrv_addr"),
        ({"namesrv_addr": ":9876"}, "namesrv_addr"),
        ({"namesrv_addr": "0.0.0.0:9876"}, "namesrv_addr"),
        ({"broker_id": "-1"}, "broker_id"),
        ({"register_name_server_period": "0"}, "register_name_server_period"),
        ({"register_broker_timeout_mills": "-5"}, "register_broker_timeout_mills"),
        ({"idle_timeout_s": "nan"}, "idle_timeout_s"),
        ({"shutdown_timeout_s": float("nan")}, "shutdown_timeout_s"),
        ({"write_timeout_s": "inf"}, "write_timeout_s"),
        ({"disk_space_warning_level_ratio": "nan"}, "disk_space_warning_level_ratio"),
        # digits other than ASCII ones, which int() and float() take
        ({"idle_timeout_s": "\u0663"}, "idle_timeout_s"),
        ({"max_frame_length": "\u0661\u0660\u0660"}, "max_frame_length"),
        ({"default_topic_queue_nums": "_8"}, "default_topic_queue_nums"),
        # past a Java long: the store's waits overflow when they become seconds
        ({"sync_flush_timeout_ms": "1" + "0" * 400}, "sync_flush_timeout_ms"),
        ({"checkpoint_interval_ms": str(2**63)}, "checkpoint_interval_ms"),
        ({"flush_consumer_offset_interval_ms": 2**63}, "flush_consumer_offset_interval_ms"),
        # 0 would answer every waiting put busy and spin the sweeping task without sleeping
        ({"os_page_cache_busy_timeout_ms": "0"}, "os_page_cache_busy_timeout_ms"),
    ],
)
def test_bad_values_name_their_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(raw)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        *((name, value) for name in TIMEOUTS for value in (math.inf, -math.inf, math.nan)),
        ("max_frame_length", math.inf),
        ("max_frame_length", 2**63),
    ],
)
def test_a_config_built_in_code_is_checked_as_a_loaded_one(field: str, value: float) -> None:
    changes: dict[str, Any] = {field: value}
    with pytest.raises(ConfigError) as info:
        BrokerConfig(**changes)
    assert info.value.key == field


def test_underscores_between_digits_are_still_numbers() -> None:
    config = build_config({"max_frame_length": "1_048_576", "idle_timeout_s": " 1_0.5 "})
    assert (config.max_frame_length, config.idle_timeout_s) == (1 << 20, 10.5)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":10911", HostPort("0.0.0.0", 10911)),
        ("[fe80::1%eth0]:1", HostPort("fe80::1%eth0", 1)),
        # unbracketed, as RocketMQ writes IPv6 addresses: the port follows the last colon
        ("::1:10911", HostPort("::1", 10911)),
        (" broker.local:0 ", HostPort("broker.local", 0)),
    ],
)
def test_host_port_forms(text: str, expected: HostPort) -> None:
    assert HostPort.parse("listen", text) == expected


@pytest.mark.parametrize("field", ["listen", "namesrv_listen", "metrics_listen"])
def test_a_port_built_in_code_is_in_range(field: str) -> None:
    changes: dict[str, Any] = {field: HostPort("127.0.0.1", 65536)}
    with pytest.raises(ConfigError) as info:
        BrokerConfig(**changes)
    assert info.value.key == field


def test_unreadable_and_invalid_toml_are_config_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.toml"), environ={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "broker_name = "), environ={})


def test_toml_nested_too_deep_is_a_config_error_naming_the_file(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, "broker_name = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"config: {path} is not valid TOML: nested too deep"


def test_toml_that_is_not_utf8_is_a_config_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_bytes(b'broker_name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(path), environ={})


def test_an_unknown_rmq_variable_stops_startup_naming_it() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={"RMQ_BROKER_NAEM": "b"})
    assert info.value.key == "RMQ_BROKER_NAEM"
    # Variables of the container entry point and the test harness are not configuration keys.
    tooling = {name: "1" for name in ("RMQ_SOAK", "RMQ_CONTAINER_TEST", "RMQ_CONTAINER_KEEP")}
    assert load_config(environ=tooling).broker_name == "broker-a"


REPO = pathlib.Path(__file__).resolve().parents[2]
#: where the project's own scripts, manifests and tests set or read environment variables
SCANNED = (
    "Dockerfile",
    "Makefile",
    "README.md",
    ".ci",
    "deploy",
    "docs",
    "tests",
    "bench",
    "broker",
)
#: RocketMQ's system topics share the prefix; they are topic names, not variables
SYSTEM_TOPIC = re.compile(r"RMQ_SYS_\w*")


def rmq_names(text: str) -> set[str]:
    return set(re.findall(r"\bRMQ_\w+", SYSTEM_TOPIC.sub("", text)))


def test_every_rmq_variable_the_project_uses_is_a_key_or_listed_as_not_one() -> None:
    # A variable the tooling sets but the broker does not know would stop every broker the
    # tooling starts; a listed one that is a key would never reach the configuration.
    fields = dataclasses.fields(BrokerConfig) + dataclasses.fields(MessageStoreConfig)
    keys = {f"RMQ_{f.name.upper()}" for f in fields}
    assert not NOT_CONFIG_ENV & keys
    seen: dict[str, str] = {}
    for top in SCANNED:
        root = REPO / top
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if (
                path.is_file()
                and path != pathlib.Path(__file__).resolve()
                and "__pycache__" not in path.parts  # compiled bytes, not names anyone uses
            ):
                for name in rmq_names(path.read_text(errors="replace")):
                    seen.setdefault(name, str(path.relative_to(REPO)))
    assert {name: where for name, where in seen.items() if name not in keys | NOT_CONFIG_ENV} == {}
    # the operator's documentation lists exactly the variables that are not keys
    readme = (REPO / "deploy" / "README.md").read_text()
    [paragraph] = [p for p in readme.split("\n\n") if "unknown `RMQ_` variable" in p]
    assert rmq_names(paragraph) == NOT_CONFIG_ENV


@pytest.mark.parametrize("off", ["none", "None", ""])
def test_metrics_listen_none_turns_the_endpoint_off(tmp_path: pathlib.Path, off: str) -> None:
    on = {"RMQ_METRICS_LISTEN": "127.0.0.1:5557"}
    assert load_config(environ=on).metrics_listen == HostPort("127.0.0.1", 5557)
    assert load_config(flags={"metrics_listen": off}, environ=on).metrics_listen is None
    assert load_config(environ={"RMQ_METRICS_LISTEN": off}).metrics_listen is None
    toml = write(tmp_path, f'metrics_listen = "{off}"\n')
    assert load_config(toml, environ={}).metrics_listen is None


def test_config_is_frozen_and_replaceable() -> None:
    config = BrokerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.broker_name = "x"  # type: ignore[misc]
    store = dataclasses.replace(config.store, mapped_file_size_commit_log=4096)
    assert dataclasses.replace(config, store=store).store.mapped_file_size_commit_log == 4096


def test_store_host_ip_follows_the_listen_address() -> None:
    assert build_config({"listen": "0.0.0.0:1"}).store_host_ip == "127.0.0.1"
    assert build_config({"listen": "10.1.2.3:1"}).store_host_ip == "10.1.2.3"
    assert build_config({"listen": "10.1.2.3:1", "broker_ip1": "1.2.3.4"}).store_host_ip == (
        "1.2.3.4"
    )
    assert build_config({"listen": "[::1]:1"}).store_host_ip == "::1"
    assert build_config({"listen": "[::]:1"}).store_host_ip == "::1"
    assert build_config({"broker_ip1": "fe80::1"}).store_host_ip == "fe80::1"


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"listen": ":1"},
        {"listen": "*:1"},
        {"listen": "[::]:1"},
        {"listen": "[::ffff:10.0.0.1]:1"},
        {"listen": "[fe80::1%eth0]:1"},
        {"broker_ip1": "fe80::1%2"},
        {"listen": "localhost:1", "broker_ip1": "10.0.0.1"},
    ],
)
def test_an_accepted_store_host_is_encodable(raw: dict[str, object]) -> None:
    config = build_config(raw)
    encoded, _ = encode_host((config.store_host_ip, config.listen.port))
    assert len(encoded) in {8, 20}


@pytest.mark.parametrize("listen", ["[::]:0", "0.0.0.0:0", ":0"])
async def test_the_route_address_reaches_a_broker_on_a_wildcard(
    nursery: trio.Nursery, tmp_path: pathlib.Path, listen: str
) -> None:
    running = await start_broker(nursery, make_config(tmp_path / "store", listen=listen))
    loopback = "::1" if running.config.listen.host == "::" else "127.0.0.1"
    async with open_producer(loopback, running.port) as producer:
        route = await producer.get_route("Wild")
    host, _, port = route.broker_datas[0].broker_addrs[0].rpartition(":")
    with trio.fail_after(10):
        async with open_producer(host, int(port)) as producer:
            result = await producer.send(Message("Wild", b"reached"))
    assert result.queue_offset == 0
    await running.stop()


@pytest.mark.parametrize("listen", ["127.0.0.1:\u00b2", "127.0.0.1:5:6"])
def test_serve_refuses_an_odd_listen_flag_in_one_line(tmp_path: pathlib.Path, listen: str) -> None:
    command = [sys.executable, "-m", "broker", "serve", "--listen", listen]
    out = subprocess.run(
        [*command, "--store-dir", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("RMQ_")},
    )
    assert out.returncode == 2, out.stderr[-2000:]
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("rmq-broker: configuration error: listen: "), line
    assert repr(listen) in line
    assert not (tmp_path / "store").exists()


def test_serve_reports_a_bad_value_in_one_line_without_traceback(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, 'flush_disk_type = "NEVER"\n')
    out = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--config", path, "--store-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "rmq-broker: configuration error: flush_disk_type: expected one of ASYNC_FLUSH, "
        "SYNC_FLUSH, got 'NEVER'"
    ]


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"RMQ_ACL_ENABLE": "true", "RMQ_ACL_FILE": "acl.yml"}, "acl_file"),
        ({"RMQ_ACL_ENABLE": "true", "RMQ_ACL_FILE": "missing.yml"}, "acl_file"),
        (
            {
                "RMQ_TLS_MODE": "enforcing",
                "RMQ_TLS_SERVER_CERT": "acl.yml",
                "RMQ_TLS_SERVER_KEY": "acl.yml",
            },
            "tls_server_cert",
        ),
    ],
)
def test_serve_refuses_to_start_with_unusable_security_files(
    tmp_path: pathlib.Path, env: dict[str, str], key: str
) -> None:
    # not YAML of the plain_acl.yml shape, not a PEM certificate either
    (tmp_path / "acl.yml").write_text("accounts: [unclosed\n")
    environ = {
        **os.environ,
        **{k: str(tmp_path / v) if "FILE" in k or "SERVER" in k else v for k, v in env.items()},
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environ,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rmq-broker: configuration error: {key}: "), out.stderr[-2000:]
    assert not (tmp_path / "store" / "abort").exists()
