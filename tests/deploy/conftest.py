"""Paths and small parsers shared by the deploy tests (Dockerfile, manifests, scripts)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"


def venv_tool(name: str) -> str:
    """A console script installed beside this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with the test extra")
    return found


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    with path.open() as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) for every Kubernetes object under deploy/k8s."""
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [(path.name, doc) for doc in load_yaml_documents(path)]
    return docs


def k8s_object(kind: str) -> dict[str, Any]:
    found = [doc for _, doc in k8s_documents() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]
