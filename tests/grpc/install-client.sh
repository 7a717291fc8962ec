#!/usr/bin/env bash
# The official RocketMQ 5 Python client, at the pins of tests/grpc/client-constraints.txt, in a
# venv of its own (.venv-rmq5 beside the project's .venv): it installs a top-level `rocketmq`
# package, as the 4.x client in the project's venv does, so the two cannot share one.
# Remade only when the pins change.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PINS=$ROOT/tests/grpc/client-constraints.txt
VENV=${RMQ5_CLIENT_VENV:-$ROOT/.venv-rmq5}
PYTHON=${PYTHON:-python3}
stamp=$VENV/.pins-$(sha256sum "$PINS" | cut -c1-16)
[[ -f $stamp ]] && exit 0
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$PINS"
touch "$stamp"
echo "installed the RocketMQ 5 client into $VENV"
