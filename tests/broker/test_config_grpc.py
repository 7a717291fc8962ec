"""The gRPC endpoint's keys: `grpc_listen` (on by default on loopback, `none` turns it off, from
every layer of the configuration) and its limits."""

from __future__ import annotations

import pathlib

import pytest
from click.testing import CliRunner

from broker.cli import main
from broker.config import ConfigError, HostPort, build_config, load_config
from broker.grpc.methods import MESSAGE_HEADROOM, GrpcSettings


def test_grpc_listens_on_loopback_8081_by_default() -> None:
    config = load_config(environ={})
    assert config.grpc_listen == HostPort("127.0.0.1", 8081)
    assert config.grpc_max_concurrent_streams == 100
    assert config.grpc_max_header_list_size == 16 * 1024


@pytest.mark.parametrize("off", ["none", "None", ""])
def test_grpc_listen_none_turns_the_endpoint_off(tmp_path: pathlib.Path, off: str) -> None:
    on = {"RMQ_GRPC_LISTEN": "0.0.0.0:9081"}
    assert load_config(environ=on).grpc_listen == HostPort("0.0.0.0", 9081)
    assert load_config(flags={"grpc_listen": off}, environ=on).grpc_listen is None
    assert load_config(environ={"RMQ_GRPC_LISTEN": off}).grpc_listen is None
    toml = tmp_path / "broker.toml"
    toml.write_text(f'[broker]\ngrpc_listen = "{off}"\n')
    assert load_config(str(toml), environ={}).grpc_listen is None


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"grpc_listen": "127.0.0.1"}, "grpc_listen"),
        ({"grpc_listen": "127.0.0.1:70000"}, "grpc_listen"),
        ({"grpc_listen": "[127.0.0.1]:8081"}, "grpc_listen"),
        ({"grpc_max_concurrent_streams": "0"}, "grpc_max_concurrent_streams"),
        ({"grpc_max_header_list_size": "-1"}, "grpc_max_header_list_size"),
        ({"grpc_max_header_list_size": "lots"}, "grpc_max_header_list_size"),
    ],
)
def test_bad_grpc_values_name_their_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(raw)
    assert info.value.key == key


def test_the_grpc_limits_follow_the_broker_config() -> None:
    config = build_config(
        {
            "grpc_max_concurrent_streams": 7,
            "grpc_max_header_list_size": 9000,
            "max_message_size": 1000,
            "idle_timeout_s": 3.0,
        }
    )
    settings = GrpcSettings.from_config(config)
    assert settings.max_concurrent_streams == 7
    assert settings.max_header_list_size == 9000
    assert settings.max_message_size == 1000 + MESSAGE_HEADROOM
    assert settings.idle_timeout_s == 3.0


def test_the_serve_flag_reaches_the_configuration(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "store")
    result = CliRunner().invoke(main, ["serve", "--store-dir", store, "--grpc-listen", "nowhere"])
    assert result.exit_code == 2
    assert "grpc_listen: expected HOST:PORT, got 'nowhere'" in result.output
