"""Broker and cluster commands through `rmq-broker admin`: clusterList and brokerStatus show
the running broker's figures, getBrokerConfig its settings, updateBrokerConfig changes a live
setting (the routes say read-only at once) and refuses a fixed one."""

from __future__ import annotations

from rmq_client.producer import Message, Producer
from tests.broker.cli_admin.support import admin, plain_rows
from tests.daemon import Daemon

SENT = 7


async def test_cluster_list_and_broker_status_show_the_broker(
    daemon: Daemon, client: Producer
) -> None:
    for index in range(SENT):
        await client.send(Message("CliStatus", f"m{index}".encode()))
    here = f"127.0.0.1:{daemon.port}"
    figures = (await admin("brokerStatus", "-n", here, "--json")).json()[here]
    assert figures["brokerVersionDesc"] == "V4_9_7"
    assert int(figures["putMessageTimesTotal"]) == SENT
    assert int(figures["commitLogMaxOffset"]) > 0
    human = await admin("brokerStatus", "-b", here)
    assert ["brokerVersionDesc", "V4_9_7"] in plain_rows(human.stdout)

    rows = (await admin("clusterList", "-n", here, "--json")).json()
    assert [
        (r["cluster"], r["brokerName"], r["brokerId"], r["addr"], r["version"]) for r in rows
    ] == [("DefaultCluster", "broker-a", 0, here, "V4_9_7")]
    assert 0 < rows[0]["space"] < 1
    human = await admin("clusterList", "-n", here)
    assert human.stdout.split("\n", 1)[0].split("\t") == [
        "#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)",
        "#OutTPS(LOAD)", "#PCWait(ms)", "#Hour", "#SPACE",
    ]  # fmt: skip
    assert plain_rows(human.stdout)[0][:5] == ["DefaultCluster", "broker-a", "0", here, "V4_9_7"]
    unknown = await admin("clusterList", "-n", here, "-c", "NoSuchCluster")
    assert "NoSuchCluster" in unknown.error_line(1)


async def test_update_broker_config_changes_a_live_setting(
    daemon: Daemon, client: Producer
) -> None:
    here = f"127.0.0.1:{daemon.port}"
    config = (await admin("getBrokerConfig", "-n", here, "--json")).json()[here]
    assert (config["brokerName"], config["brokerClusterName"]) == ("broker-a", "DefaultCluster")
    human = await admin("getBrokerConfig", "-b", here)
    assert f"============{here}============" in human.stdout
    assert ["brokerName", "broker-a"] in plain_rows(human.stdout.split("\n", 1)[1])

    await client.send(Message("CliConfig", b"before"))
    run = await admin("updateBrokerConfig", "-n", here, "-k", "brokerPermission", "-v", "4")
    assert (run.code, run.stdout) == (0, f"update broker config success, {here}\n")
    config = (await admin("getBrokerConfig", "-n", here, "--json")).json()[here]
    assert config["brokerPermission"] == "4"
    # read-only at once: the route the name server gives clients says so
    route = (await admin("topicRoute", "-n", here, "-t", "CliConfig", "--json")).json()
    assert route["queueDatas"][0]["perm"] == 4
    run = await admin(
        "updateBrokerConfig", "-b", here, "-k", "brokerPermission", "-v", "6", "--json"
    )
    assert run.json() == {"key": "brokerPermission", "value": "6", "brokers": [here]}
    route = (await admin("topicRoute", "-n", here, "-t", "CliConfig", "--json")).json()
    assert route["queueDatas"][0]["perm"] == 6

    fixed = await admin("updateBrokerConfig", "-n", here, "-k", "brokerName", "-v", "other")
    assert "brokerName" in fixed.error_line(1)
    unknown = await admin("updateBrokerConfig", "-n", here, "-k", "noSuchKey", "-v", "1")
    assert "noSuchKey" in unknown.error_line(1)
    missing = await admin("updateBrokerConfig", "-n", here, "-k", "maxMessageSize")
    assert "-v" in missing.error_line(2)
