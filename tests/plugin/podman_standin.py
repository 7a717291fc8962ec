"""A stand-in for `podman`, for running docs/testing.md's container block without an image.

Knows `run -d --name NAME -p IP:PORT:PORT [-e KEY=VALUE]... IMAGE [ARGS]`, `stop [-t SECONDS]
NAME` and `rm [-f] NAME`. `run` starts what the image runs, as a local process: the broker
target's ENTRYPOINT read from the Dockerfile, then ARGS, with the image's environment (its
`RMQ_LISTEN` default), the `-e` variables on top and the store in a scratch directory. Where a
container would isolate the broker, the stand-in refuses what would not work from the host: a
port published under another number than the broker listens on, or one it does not listen on.
`stop` sends SIGTERM and exits 0 once the broker logged a clean shutdown. State lives in
$PODMAN_STANDIN_STATE. Usage: python podman_standin.py ARGS...
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Final, NoReturn

ROOT: Final = pathlib.Path(__file__).resolve().parents[2]
#: the image's own settings that matter on the host (the Dockerfile's ENV)
IMAGE_LISTEN: Final = "0.0.0.0:10911"


def fail(message: str) -> NoReturn:
    print(f"podman stand-in: {message}", file=sys.stderr)
    sys.exit(125)


def entrypoint() -> list[str]:
    """The last ENTRYPOINT of the Dockerfile: the default (broker) target's."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    found = [line.removeprefix("ENTRYPOINT") for line in lines if line.startswith("ENTRYPOINT")]
    command = json.loads(found[-1])
    assert isinstance(command, list)
    return [str(word) for word in command]


def state() -> pathlib.Path:
    return pathlib.Path(os.environ["PODMAN_STANDIN_STATE"])


def run(args: list[str]) -> None:
    name, publish, env = "", "", {"RMQ_LISTEN": IMAGE_LISTEN}
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option == "-d":
            continue
        if not args:
            fail(f"{option} needs a value")
        value = args.pop(0)
        if option == "--name":
            name = value
        elif option == "-p":
            publish = value
        elif option == "-e":
            key, sep, text = value.partition("=")
            if not sep:
                fail(f"-e {value}: the stand-in takes KEY=VALUE only")
            env[key] = text
        else:
            fail(f"unsupported option {option}")
    if not (name and publish and args):
        fail("run needs --name, -p and an image")
    args.pop(0)  # the image: its entry point is the Dockerfile's
    ip, _, ports = publish.partition(":")
    host_port, _, container_port = ports.partition(":")
    if host_port != container_port:
        fail(f"-p {publish}: clients follow routes to the container's port; publish the same one")
    if env["RMQ_LISTEN"].rpartition(":")[2] != container_port:
        fail(f"the broker listens on {env['RMQ_LISTEN']}, not on the published {container_port}")
    # On the host the broker listens where the port is published; a container's unpublished
    # ports (metrics, the gRPC endpoint's 8081, the HA port next to the listen port) would
    # collide with the host's, where other brokers may hold them.
    env.update(
        RMQ_LISTEN=f"{ip}:{container_port}",
        RMQ_METRICS_LISTEN="none",
        RMQ_GRPC_LISTEN="none",
        RMQ_HA_LISTEN_PORT="0",
    )
    store = state() / f"{name}.store"
    store.mkdir()
    env["RMQ_STORE_PATH_ROOT_DIR"] = str(store)
    base = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
    with open(state() / f"{name}.log", "wb") as log:
        process = subprocess.Popen(
            [*entrypoint(), *args],
            env={**base, **env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    (state() / f"{name}.pid").write_text(str(process.pid))
    print(f"standin-{name}")


def alive(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def stop(args: list[str]) -> None:
    timeout_s = 10.0
    if args[:1] == ["-t"]:
        timeout_s = float(args[1])
        args = args[2:]
    (name,) = args
    pid = int((state() / f"{name}.pid").read_text())
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        fail(f"{name} did not stop within {timeout_s:g} s")
    if '"shutdown_complete"' not in (state() / f"{name}.log").read_text():
        fail(f"{name} stopped without a clean shutdown")


def rm(args: list[str]) -> None:
    force = args[:1] == ["-f"]
    (name,) = args[1:] if force else args
    pid = int((state() / f"{name}.pid").read_text())
    if alive(pid):
        if not force:
            fail(f"{name} is running")
        os.kill(pid, signal.SIGKILL)
    (state() / f"{name}.pid").unlink()


def main() -> None:
    command, *args = sys.argv[1:]
    {"run": run, "stop": stop, "rm": rm}.get(command, lambda _: fail(f"no {command!r}"))(args)


if __name__ == "__main__":
    main()
