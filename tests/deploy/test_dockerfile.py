"""The Dockerfile: hadolint clean, and the properties operators rely on, read off the file."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import tomllib
from dataclasses import dataclass

import pytest

from tests.deploy.conftest import ROOT, venv_tool

DOCKERFILE = ROOT / "Dockerfile"
BROKER_PORT = 10911
METRICS_PORT = 5557
GRPC_PORT = 8081
STORE_DIR = "/var/lib/rmq-broker"


@dataclass(frozen=True, slots=True)
class Instruction:
    stage: str
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped, tagged with their stage."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        logical.append(pending + line)
        pending = ""
    stage = ""
    result = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            match = re.search(r"\bAS\s+(\S+)", args, re.IGNORECASE)
            stage = match.group(1) if match else ""
        result.append(Instruction(stage, keyword.upper(), args.strip()))
    return result


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def in_stage(instructions: list[Instruction], stage: str, keyword: str) -> list[str]:
    return [i.args for i in instructions if i.stage == stage and i.keyword == keyword]


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [venv_tool("hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_parser_sees_stages_and_joined_lines() -> None:
    text = "FROM a AS one\n# note\nRUN x \\\n    && y\nFROM one AS two\nUSER 1\n"
    assert parse_dockerfile(text) == [
        Instruction("one", "FROM", "a AS one"),
        Instruction("one", "RUN", "x && y"),
        Instruction("two", "FROM", "one AS two"),
        Instruction("two", "USER", "1"),
    ]


def test_base_image_is_a_build_arg_pinned_to_bookworm(instructions: list[Instruction]) -> None:
    first = instructions[0]
    assert (first.keyword, first.args) == ("ARG", "PYTHON_IMAGE=python:3.11-slim-bookworm")
    froms = [i.args for i in instructions if i.keyword == "FROM"]
    assert froms[0].startswith("${PYTHON_IMAGE} ")


def test_broker_is_the_default_target(instructions: list[Instruction]) -> None:
    assert instructions[-1].stage == "broker"


def test_dependencies_are_installed_before_the_code_is_copied(
    instructions: list[Instruction],
) -> None:
    deps = in_stage(instructions, "deps", "COPY")
    assert deps == ["pyproject.toml constraints.txt ./"]
    assert any("-c constraints.txt" in run for run in in_stage(instructions, "deps", "RUN"))
    assert in_stage(instructions, "wheel", "COPY") == [". ."]
    order = [i.stage for i in instructions if i.keyword == "FROM"]
    assert order.index("deps") < order.index("wheel")


@pytest.mark.parametrize("stage", ["broker", "spark"])
def test_runtime_images_run_as_a_numeric_non_root_user(
    instructions: list[Instruction], stage: str
) -> None:
    users = in_stage(instructions, stage, "USER")
    assert users, f"{stage} sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0


def test_broker_entrypoint_is_exec_form_serve(instructions: list[Instruction]) -> None:
    (entrypoint,) = in_stage(instructions, "broker", "ENTRYPOINT")
    assert json.loads(entrypoint) == ["rmq-broker", "serve"]


def test_broker_declares_store_volume_ports_and_healthcheck(
    instructions: list[Instruction],
) -> None:
    assert in_stage(instructions, "broker", "VOLUME") == [json.dumps([STORE_DIR])]
    (expose,) = in_stage(instructions, "broker", "EXPOSE")
    assert {int(port) for port in expose.split()} == {BROKER_PORT, METRICS_PORT, GRPC_PORT}
    (health,) = in_stage(instructions, "broker", "HEALTHCHECK")
    # The probed port follows RMQ_LISTEN, so moving the broker with -e keeps the check right.
    command = json.loads(health.partition(" CMD ")[2])
    assert command == [
        "/bin/sh",
        "-c",
        'exec rmq-broker health --timeout 4 --addr "127.0.0.1:${RMQ_LISTEN##*:}"',
    ]


def test_configuration_defaults_point_at_the_volume_and_ports(
    instructions: list[Instruction],
) -> None:
    env = " ".join(in_stage(instructions, "runtime", "ENV"))
    assert f"RMQ_STORE_PATH_ROOT_DIR={STORE_DIR}" in env
    assert f"RMQ_LISTEN=0.0.0.0:{BROKER_PORT}" in env
    assert f"RMQ_METRICS_LISTEN=0.0.0.0:{METRICS_PORT}" in env
    # the RocketMQ 5 clients' port, on every interface of the container
    assert f"RMQ_GRPC_LISTEN=0.0.0.0:{GRPC_PORT}" in env


def test_spark_target_has_a_debian_jre_and_the_spark_extra(
    instructions: list[Instruction],
) -> None:
    assert any("openjdk-17-jre-headless" in run for run in in_stage(instructions, "spark", "RUN"))
    spark_deps = " ".join(in_stage(instructions, "deps-spark", "RUN"))
    assert '["spark"]' in spark_deps
    (entrypoint,) = in_stage(instructions, "spark", "ENTRYPOINT")
    assert json.loads(entrypoint) == ["rmq-broker"]


def test_dockerignore_is_an_allow_list() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert {"pyproject.toml", "constraints.txt", "README.md", "broker", "store"} <= allowed
    assert not allowed & {".venv", ".git", ".store", "tests"}


def test_dockerignore_lets_in_every_package_the_project_installs() -> None:
    # A package missing from the build context builds fine and fails only at import time.
    with (ROOT / "pyproject.toml").open("rb") as fh:
        setuptools = tomllib.load(fh)["tool"]["setuptools"]
    packages = {pattern.rstrip("*") for pattern in setuptools["packages"]["find"]["include"]}
    allowed = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert packages - allowed == set()
    for module in setuptools.get("py-modules", []):
        assert any(fnmatch.fnmatch(f"{module}.py", pattern) for pattern in allowed), module
