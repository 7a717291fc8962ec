"""Kubernetes manifests and the Compose file: valid against their schemas (offline), consistent
with the image (ports, volume, user) and with the broker's configuration loader."""

from __future__ import annotations

import copy
import importlib.resources
import json
import tomllib
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from broker.config import load_config
from store.config import GIB, FlushDiskType
from tests.deploy.conftest import DEPLOY, K8S, k8s_documents, k8s_object, load_yaml_documents
from tests.deploy.test_dockerfile import BROKER_PORT, GRPC_PORT, METRICS_PORT, STORE_DIR

# The oldest and the newest Kubernetes minor the manifests are meant for.
K8S_VERSIONS = ("1.29.0", "1.37.0")
HEALTH = ["rmq-broker", "health", "--addr", f"127.0.0.1:{BROKER_PORT}"]


def compose_schema() -> dict[str, Any]:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((vendor / "compose-spec.json").read_text())
    return schema


def compose_errors(document: dict[str, Any]) -> list[str]:
    validator_class = jsonschema.validators.validator_for(compose_schema())
    validator = validator_class(compose_schema())
    return [error.message for error in validator.iter_errors(document)]


def broker_container() -> dict[str, Any]:
    spec = k8s_object("StatefulSet")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    result: dict[str, Any] = container
    return result


def compose() -> dict[str, Any]:
    (document,) = load_yaml_documents(DEPLOY / "docker-compose.yml")
    return document


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_k8s_object_is_valid_strictly(version: str) -> None:
    documents = k8s_documents()
    assert {doc["kind"] for _, doc in documents} >= {"StatefulSet", "Service", "ConfigMap"}
    for name, doc in documents:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {exc}")


def test_k8s_validation_rejects_a_misspelt_field() -> None:
    broken = copy.deepcopy(k8s_object("StatefulSet"))
    probe = broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["exec"]["comand"] = probe["exec"].pop("command")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = load_yaml_documents(K8S / "kustomization.yaml")
    files = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_statefulset_claims_a_volume_per_broker_at_the_image_volume() -> None:
    statefulset = k8s_object("StatefulSet")
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in broker_container()["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == STORE_DIR
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert statefulset["spec"]["serviceName"] == k8s_object("Service")["metadata"]["name"]


def test_headless_service_exposes_the_container_ports() -> None:
    service = k8s_object("Service")["spec"]
    assert service["clusterIP"] == "None"
    ports = {p["name"]: p["containerPort"] for p in broker_container()["ports"]}
    assert ports == {"remoting": BROKER_PORT, "metrics": METRICS_PORT, "grpc": GRPC_PORT}
    assert {p["targetPort"]: p["port"] for p in service["ports"]} == ports
    labels = k8s_object("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= labels.items()


def test_probes_run_the_broker_health_command() -> None:
    container = broker_container()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == HEALTH, probe


def test_pod_runs_as_the_image_user_with_time_for_the_final_flush() -> None:
    pod = k8s_object("StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["terminationGracePeriodSeconds"] >= 60


def test_memory_request_covers_a_mapped_segment_and_the_process() -> None:
    resources = broker_container()["resources"]
    units = {"Gi": GIB, "Mi": 1 << 20}
    memory = resources["requests"]["memory"]
    request = int(memory[:-2]) * units[memory[-2:]]
    assert request >= GIB + 512 * (1 << 20)
    assert resources["limits"]["memory"] == memory


def test_configmap_toml_loads_with_the_broker_loader(tmp_path: Any) -> None:
    toml_text = k8s_object("ConfigMap")["data"]["broker.toml"]
    path = tmp_path / "broker.toml"
    path.write_text(toml_text)
    env = next(e for e in broker_container()["env"] if e["name"] == "RMQ_CONFIG")
    assert env["value"] == "/etc/rmq-broker/broker.toml"
    image_env = {
        "RMQ_CONFIG": str(path),
        "RMQ_LISTEN": f"0.0.0.0:{BROKER_PORT}",
        "RMQ_METRICS_LISTEN": f"0.0.0.0:{METRICS_PORT}",
        "RMQ_STORE_PATH_ROOT_DIR": STORE_DIR,
        "RMQ_BROKER_NAME": "rmq-broker-0",
    }
    config = load_config(environ=image_env)
    assert config.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.store.store_path_root_dir == STORE_DIR
    assert config.broker_name == "rmq-broker-0"
    # Inside the clients' 3 s default send timeout (upstream issue 2471).
    assert config.store.sync_flush_timeout_ms < 3000


def test_compose_file_is_valid_against_the_compose_spec() -> None:
    assert compose_errors(compose()) == []


def test_compose_validation_rejects_an_unknown_key() -> None:
    broken = copy.deepcopy(compose())
    broken["services"]["broker"]["stop_grace"] = "120s"
    assert compose_errors(broken)


def test_compose_broker_has_volume_health_check_and_ports() -> None:
    broker = compose()["services"]["broker"]
    assert f"store:{STORE_DIR}" in broker["volumes"]
    assert broker["healthcheck"]["test"] == ["CMD", *HEALTH]
    assert {f"{BROKER_PORT}:{BROKER_PORT}", f"{METRICS_PORT}:{METRICS_PORT}"} <= set(
        broker["ports"]
    )
    mounted = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"]}
    config_file = DEPLOY / mounted[broker["environment"]["RMQ_CONFIG"]]
    assert tomllib.loads(config_file.read_text())["store"]["flush_disk_type"] == "SYNC_FLUSH"


def test_compose_pipeline_reads_the_store_read_only_on_demand() -> None:
    pipeline = compose()["services"]["pipeline"]
    assert pipeline["profiles"] == ["pipeline"]
    assert pipeline["build"]["target"] == "spark"
    assert f"store:{STORE_DIR}:ro" in pipeline["volumes"]
    command = pipeline["command"]
    assert command[:2] == ["pipeline", "export"]
    assert command[command.index("--store-dir") + 1] == STORE_DIR
