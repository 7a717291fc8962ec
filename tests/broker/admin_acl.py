"""The ACL the admin requests' permission tests run with: a plain account that may send, and an
admin account; a broker started with it."""

from __future__ import annotations

import pathlib

import trio

from rmq_client.producer import SessionCredentials
from tests.conftest import RunningBroker, make_config, start_broker

ACL = """
accounts:
  - accessKey: producer1
    secretKey: "producer-secret"
    defaultTopicPerm: PUB
  - accessKey: operator1
    secretKey: "operator-secret"
    admin: true
"""
PLAIN = SessionCredentials("producer1", "producer-secret")
ADMIN = SessionCredentials("operator1", "operator-secret")


def write_acl(tmp_path: pathlib.Path) -> str:
    """The ACL file's path, written under `tmp_path`."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    return str(acl_file)


async def start_acl_broker(nursery: trio.Nursery, tmp_path: pathlib.Path) -> RunningBroker:
    """An in-process broker with ACL on, the accounts above."""
    config = make_config(tmp_path / "store", acl_enable=True, acl_file=write_acl(tmp_path))
    return await start_broker(nursery, config)
