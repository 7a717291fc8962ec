#!/usr/bin/env bash
# The RocketMQ 5 Node.js client (rocketmq-client-nodejs, at the version and lock of
# tests/grpc/node-client/) in .node-rmq5 beside the project's .venv, for
# tests/grpc/test_node_client.py. Node and npm come from Debian's nodejs and npm packages when
# they are not on the PATH (apt-get as root; anywhere else it names them and fails). The
# client is remade only when its package files change.
set -euo pipefail
# shellcheck source=tests/apt-missing.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt-missing.sh"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    install_missing install-node-client "install Node.js 18 or later and npm" nodejs npm
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=$ROOT/tests/grpc/node-client
DEST=$ROOT/.node-rmq5
stamp=$DEST/.lock-$(cat "$SRC/package.json" "$SRC/package-lock.json" | sha256sum | cut -c1-16)
[[ -f $stamp ]] && exit 0
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
(cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error)
touch "$stamp"
echo "installed the RocketMQ 5 Node.js client into $DEST"
