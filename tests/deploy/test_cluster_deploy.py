"""The cluster deployments: deploy/docker-compose.cluster.yml and the deploy/k8s/cluster
overlay. Valid against their schemas (offline); every broker's settings load with the broker's
own loader; the name-server addresses the brokers get are the name servers' names and ports;
broker names are distinct; each broker registers an address a client can dial."""

from __future__ import annotations

from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from broker.config import load_config
from tests.deploy.conftest import DEPLOY, K8S, load_yaml_documents
from tests.deploy.test_dockerfile import BROKER_PORT, STORE_DIR
from tests.deploy.test_manifests import K8S_VERSIONS, compose_errors

CLUSTER = K8S / "cluster"


def compose() -> dict[str, Any]:
    (document,) = load_yaml_documents(DEPLOY / "docker-compose.cluster.yml")
    return document


def services(kind: str) -> dict[str, dict[str, Any]]:
    """The Compose services whose entrypoint is `rmq-broker namesrv` ("namesrv") or not."""
    found = {}
    for name, service in compose()["services"].items():
        is_namesrv = service.get("entrypoint") == ["rmq-broker", "namesrv"]
        if is_namesrv == (kind == "namesrv"):
            found[name] = service
    return found


def test_compose_cluster_is_valid_against_the_compose_spec() -> None:
    assert compose_errors(compose()) == []


def test_compose_cluster_has_two_name_servers_and_two_broker_groups() -> None:
    namesrvs, brokers = services("namesrv"), services("broker")
    assert len(namesrvs) == 2 and len(brokers) == 3
    names, slaves = set(), []
    for service in brokers.values():
        env = service["environment"]
        config = load_config(
            environ={**env, "RMQ_CONFIG": str(DEPLOY / "broker-sync.toml")},
        )
        names.add(config.broker_name)
        if config.broker_id:
            slaves.append(config)
        # every name server, at the port it listens on inside the network
        listens = {n: s["command"][s["command"].index("--listen") + 1] for n, s in namesrvs.items()}
        wanted = {f"{n}:{listen.rpartition(':')[2]}" for n, listen in listens.items()}
        assert {str(a) for a in config.namesrv_addrs} == wanted
        # the address it registers is one a client on the host dials: the published port
        port = config.listen.port
        assert f"{port}:{port}" in service["ports"]
        assert config.store_host_ip == "127.0.0.1"
        assert any(v.endswith(f":{STORE_DIR}") for v in service["volumes"])
    assert len(names) == 2
    assert len({v for s in brokers.values() for v in s["volumes"] if STORE_DIR in v}) == 3
    # one slave, of broker-a, pointed at broker-a's HA port (its listen port + 1) and listen port
    (slave,) = slaves
    assert (slave.broker_name, slave.broker_id, slave.store.broker_role.name) == (
        "broker-a",
        1,
        "SLAVE",
    )
    assert str(slave.ha_master_address) == "broker-a:10912"
    assert str(slave.ha_master_broker_address) == "broker-a:10911"


def cluster_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, doc)
        for path in sorted(CLUSTER.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in load_yaml_documents(path)
    ]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_cluster_objects_are_valid_strictly(version: str) -> None:
    documents = cluster_documents()
    kinds = {doc["kind"] for name, doc in documents if name == "namesrv.yaml"}
    assert kinds == {"Service", "StatefulSet", "PodDisruptionBudget"}
    for name, doc in documents:
        if name != "broker-patch.yaml":  # a patch is not a whole object
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {exc}")


def test_cluster_overlay_points_the_brokers_at_every_name_server() -> None:
    (kustomization,) = load_yaml_documents(CLUSTER / "kustomization.yaml")
    assert ".." in kustomization["resources"]
    files = {p.name for p in CLUSTER.glob("*.yaml")} - {"kustomization.yaml"}
    patches = {p["path"] for p in kustomization["patches"]}
    assert set(kustomization["resources"]) - {".."} | patches == files
    namesrv = {d["kind"]: d for n, d in cluster_documents() if n == "namesrv.yaml"}
    statefulset, service = namesrv["StatefulSet"], namesrv["Service"]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    listen = container["args"][container["args"].index("--listen") + 1]
    port = int(listen.rpartition(":")[2])
    assert {p["containerPort"] for p in container["ports"]} == {port}
    assert {p["port"] for p in service["spec"]["ports"]} == {port}
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    (patch,) = load_yaml_documents(CLUSTER / "broker-patch.yaml")
    (broker,) = patch["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in broker["env"]}
    config = load_config(
        environ={**env, "RMQ_LISTEN": f"0.0.0.0:{BROKER_PORT}", "RMQ_BROKER_IP1": "10.0.0.7"}
    )
    name, replicas = statefulset["metadata"]["name"], statefulset["spec"]["replicas"]
    pods = [f"{name}-{i}.{service['metadata']['name']}" for i in range(replicas)]
    assert [str(a) for a in config.namesrv_addrs] == [f"{pod}:{port}" for pod in pods]
