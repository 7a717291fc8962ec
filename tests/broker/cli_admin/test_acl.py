"""With ACL on, the admin commands sign their requests with --access-key/--secret-key: an
admin account may change topics and broker settings, a plain account is refused in one line
naming the broker's remark, and no keys at all are refused too."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.broker.cli_admin.support import admin
from tests.daemon import Daemon

ACL = """
accounts:
  - accessKey: producer1
    secretKey: "producer-secret"
    defaultTopicPerm: PUB
    defaultGroupPerm: SUB
  - accessKey: operator1
    secretKey: "operator-secret"
    admin: true
"""
PLAIN = ("--access-key", "producer1", "--secret-key", "producer-secret")
OPERATOR = ("--access-key", "operator1", "--secret-key", "operator-secret")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = pathlib.Path(tmp_path_factory.mktemp("cli-admin-acl"))
    (root / "plain_acl.yml").write_text(ACL)
    env = {"RMQ_ACL_ENABLE": "true", "RMQ_ACL_FILE": str(root / "plain_acl.yml")}
    running = Daemon(root / "store", env=env)
    yield running
    running.stop()


async def test_changes_need_an_admin_account(daemon: Daemon) -> None:
    here = f"127.0.0.1:{daemon.port}"
    create = ("updateTopic", "-b", here, "-t", "AclTopic", "-r", "2", "-w", "2")
    refused = (await admin(*create, *PLAIN)).error_line(1)
    assert f"broker {here} refused: NO_PERMISSION (16)" in refused
    assert (await admin(*create)).code == 1  # unsigned
    done = await admin(*create, *OPERATOR)
    assert (done.code, done.stdout) == (0, f"create topic to {here} success.\n")
    status = (await admin("topicStatus", "-b", here, "-t", "AclTopic", "--json", *OPERATOR)).json()
    assert [q["queueId"] for q in status["queues"]] == [0, 1]

    change = ("updateBrokerConfig", "-b", here, "-k", "brokerPermission", "-v", "6")
    assert "NO_PERMISSION" in (await admin(*change, *PLAIN)).error_line(1)
    assert (await admin(*change, *OPERATOR)).code == 0
    half = await admin(*change, "--access-key", "operator1")
    assert "--secret-key" in half.error_line(2)
