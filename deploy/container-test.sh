#!/usr/bin/env bash
# Container smoke test: build the broker image with podman and run it end to end.
#
#   bash deploy/container-test.sh          (make test-container)
#
# 1. installs podman, runc and mmdebstrap with apt-get when they are missing (root only);
# 2. bootstraps a stand-in for python:3.11-slim-bookworm with mmdebstrap once, cached as a tar
#    under $RMQ_CONTAINER_CACHE (there is no registry to pull from), and imports it;
# 3. builds the Dockerfile against it (`--build-arg PYTHON_IMAGE=...`, everything after FROM is
#    what users build);
# 4. runs the image with the store on a named volume and --network host on free loopback ports,
#    sends messages from the host with the client stub, checks /metrics and the HEALTHCHECK;
# 5. `podman stop` (SIGTERM): the broker must log a clean shutdown and exit 0;
# 6. starts it again on the same volume, reads the messages back with `rmq-broker inspect` in a
#    second container, sends more, stops it again;
# 7. starts deploy/docker-compose.cluster.yml with podman-compose (pinned in constraints.txt,
#    in a cached venv of its own) on the image built in 3, sends to broker-a and broker-b
#    from the host through the published loopback ports, pulls every message back, waits for
#    broker-a's slave to hold what broker-a holds (deploy/compose_check.py), and takes the
#    cluster down again.
# Podman's storage lives in a scratch directory that is removed at the end, pass or fail.
#
# Environment:
#   RMQ_CONTAINER_TEST=skip     exit 0 at once, saying so (never skipped silently otherwise)
#   RMQ_CONTAINER_CACHE=DIR     where the base tar is kept (default ~/.cache/rmq-broker)
#   RMQ_CONTAINER_KEEP=1        keep the scratch directory for a post-mortem
#   RMQ_CONTAINER_TEST_SPARK=1  also build the spark target and export the store to Parquet
#   RMQ_CONTAINER_TEST_COMPOSE=skip  leave out step 7 (the compose cluster)
# Exit codes: 0 passed, 1 a check failed, 2 this machine cannot run the test.
set -euo pipefail

# Only bash builtins until the preflight has passed: this must explain itself on any machine.
HERE=$(cd "${BASH_SOURCE[0]%/*}" && pwd)
ROOT=${HERE%/deploy}
BASE_IMAGE=localhost/ci/python:3.11-slim-bookworm
# Bump when the recipe of the stand-in base changes, so stale caches are not reused.
BASE_RECIPE=v1
IMAGE=localhost/rmq-broker:container-test
TOPIC=ContainerSmokeTopic
MESSAGES=20

say() { printf 'container-test: %s\n' "$*" >&2; }
cannot_run() {
    say "cannot run: $*"
    say "set RMQ_CONTAINER_TEST=skip to skip this test on purpose"
    exit 2
}
fail() {
    say "FAILED: $*"
    exit 1
}

if [[ ${RMQ_CONTAINER_TEST:-} == skip ]]; then
    say "skipped: RMQ_CONTAINER_TEST=skip"
    exit 0
fi

preflight() {
    local missing=() tool
    for tool in podman runc mmdebstrap; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    if ((${#missing[@]})); then
        command -v apt-get >/dev/null ||
            cannot_run "${missing[*]} not installed and no apt-get to install them"
        ((EUID == 0)) || cannot_run "${missing[*]} not installed and not root to apt-get them"
        say "installing podman runc mmdebstrap with apt-get"
        apt-get update -qq >/dev/null || cannot_run "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap >/dev/null ||
            cannot_run "apt-get install podman runc mmdebstrap failed"
    fi
    ((EUID == 0)) || cannot_run "podman storage and mmdebstrap here need root"
    [[ -x $ROOT/.venv/bin/rmq-broker ]] ||
        cannot_run "$ROOT/.venv/bin/rmq-broker missing: run 'make install-test' first"
}

configure_podman() {
    SCRATCH=$(mktemp -d /var/tmp/rmq-container-test.XXXXXX)
    local nofile
    nofile=$(ulimit -Hn)
    # crun cannot start containers on cgroup-hybrid hosts, and podman's default ulimits exceed
    # what an unprivileged VM grants: both are overridden here, for this run only.
    cat >"$SCRATCH/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
    cat >"$SCRATCH/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$SCRATCH/graph"
runroot = "$SCRATCH/run"
EOF
    export CONTAINERS_CONF=$SCRATCH/containers.conf
    export CONTAINERS_STORAGE_CONF=$SCRATCH/storage.conf
    export TMPDIR=$SCRATCH/tmp
    mkdir -p "$TMPDIR"
}

cleanup() {
    local rc=$?
    set +e
    if [[ -n ${SCRATCH:-} && -n ${CONTAINERS_STORAGE_CONF:-} ]]; then
        if ((rc != 0)) && [[ -n ${CONTAINER:-} ]]; then
            say "last broker logs:"
            podman logs --tail 40 "$CONTAINER" >&2 2>&1
        fi
        if [[ -n ${COMPOSE_UP:-} ]]; then
            ((rc == 0)) || compose logs --tail 20 >&2 2>&1
            compose down -v -t 5 >/dev/null 2>&1
        fi
        podman rm -f -t 0 -a >/dev/null 2>&1
        podman pod rm -f -a >/dev/null 2>&1
        podman network rm -f "${COMPOSE_PROJECT}_default" >/dev/null 2>&1
        podman volume rm -f -a >/dev/null 2>&1
        podman rmi -f -a >/dev/null 2>&1
        podman system reset -f >/dev/null 2>&1
        if [[ ${RMQ_CONTAINER_KEEP:-} == 1 ]]; then
            say "kept $SCRATCH"
        else
            rm -rf "$SCRATCH"
        fi
    fi
    exit "$rc"
}

debian_mirror() {
    local uri
    uri=$(grep -rhoE 'https?://[^ ]+/debian/?$' /etc/apt/sources.list /etc/apt/sources.list.d/ \
        2>/dev/null | grep -v security | head -n1 || true)
    printf '%s\n' "${uri:-http://deb.debian.org/debian}"
}

# The stand-in behaves like the official image where the Dockerfile relies on it: python and pip
# on PATH, pip allowed to install, and (for this machine's HTTPS proxy) the host's CA bundle.
# The CA bundle and pip.conf go into this base only, never into the Dockerfile.
bootstrap_base() {
    local cache=${RMQ_CONTAINER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rmq-broker}
    local tar=$cache/python-3.11-slim-bookworm-$BASE_RECIPE.tar
    if [[ ! -s $tar ]]; then
        mkdir -p "$cache"
        say "bootstrapping the base image with mmdebstrap (once; cached in $tar)"
        # The hooks' $1 is the new root, expanded by mmdebstrap, not here.
        # shellcheck disable=SC2016
        mmdebstrap --quiet --variant=minbase \
            --include=python3,python3-venv,python3-pip,ca-certificates,netbase,tzdata \
            --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python"' \
            --customize-hook='ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip"' \
            --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
            --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/"' \
            --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" >"$1/etc/pip.conf"' \
            --format=tar bookworm "$tar.partial" "$(debian_mirror)"
        mv "$tar.partial" "$tar"
    fi
    podman import --quiet "$tar" "$BASE_IMAGE" >/dev/null
}

build_image() {
    say "building $IMAGE"
    podman build --quiet --format docker --network host --pull=never \
        --build-arg "PYTHON_IMAGE=$BASE_IMAGE" -t "$IMAGE" "$ROOT" >"$SCRATCH/build.log" 2>&1 ||
        { cat "$SCRATCH/build.log" >&2; fail "podman build"; }
}

free_port() {
    "$ROOT/.venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_broker() {
    CONTAINER=$1
    podman run -d --name "$CONTAINER" --network host \
        -v "$VOLUME:/var/lib/rmq-broker" \
        -e "RMQ_LISTEN=127.0.0.1:$PORT" -e "RMQ_METRICS_LISTEN=127.0.0.1:$METRICS_PORT" \
        "$IMAGE" --flush-disk-type SYNC_FLUSH >/dev/null 2>"$SCRATCH/run.err" ||
        { cat "$SCRATCH/run.err" >&2; fail "podman run $CONTAINER"; }
    local _
    for _ in $(seq 1 120); do
        if "$ROOT/.venv/bin/rmq-broker" health --addr "127.0.0.1:$PORT" >/dev/null 2>&1; then
            say "$CONTAINER is healthy on 127.0.0.1:$PORT"
            return 0
        fi
        [[ $(podman inspect -f '{{.State.Running}}' "$CONTAINER") == true ]] ||
            fail "$CONTAINER exited before it was healthy"
        sleep 0.5
    done
    fail "$CONTAINER not healthy after 60 s"
}

send_messages() {
    local topic=$1 summary
    summary=$("$ROOT/.venv/bin/rmq-broker" send --namesrv "127.0.0.1:$PORT" --topic "$topic" \
        --count "$MESSAGES" --size 256 --concurrency 4) || fail "send to $topic: $summary"
    "$ROOT/.venv/bin/python" -c 'import json, sys
d = json.loads(sys.argv[1])
sys.exit(0 if d["sent"] == int(sys.argv[2]) and d["failed"] == 0 else 1)' "$summary" "$MESSAGES" ||
        fail "send to $topic: $summary"
    say "sent $MESSAGES messages to $topic"
}

check_metrics() {
    local body
    body=$("$ROOT/.venv/bin/python" -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$METRICS_PORT/metrics") || fail "GET /metrics"
    grep -q "^rmq_broker_put_messages_total{.*status=\"PUT_OK\".* $MESSAGES.0\$" <<<"$body" ||
        fail "/metrics does not count $MESSAGES PUT_OK puts"
    grep -q '^rmq_broker_store_writeable 1.0$' <<<"$body" ||
        fail "/metrics does not show a writeable store"
    say "/metrics counts the puts and shows the store"
}

check_healthcheck() {
    podman healthcheck run "$CONTAINER" >/dev/null 2>&1 || fail "the image's HEALTHCHECK failed"
    say "the image's HEALTHCHECK passes"
}

stop_broker() {
    podman stop -t 30 "$CONTAINER" >/dev/null
    local code
    code=$(podman inspect -f '{{.State.ExitCode}}' "$CONTAINER")
    podman logs "$CONTAINER" >"$SCRATCH/$CONTAINER.log" 2>&1
    ((code == 0)) || fail "$CONTAINER exited with $code after SIGTERM"
    grep -q '"event": *"shutdown_complete"' "$SCRATCH/$CONTAINER.log" ||
        fail "$CONTAINER logged no clean shutdown (shutdown_complete)"
    say "$CONTAINER stopped cleanly on SIGTERM (exit 0)"
}

# Reads the store from a second container while (or after) the broker runs: the reader never goes
# past the durable offset, so every message acknowledged under SYNC_FLUSH must be there, intact.
check_store_holds() {
    local topic=$1 out
    out=$(podman run --rm --network none -v "$VOLUME:/var/lib/rmq-broker:ro" \
        --entrypoint rmq-broker "$IMAGE" inspect --store-dir /var/lib/rmq-broker \
        --topic "$topic" 2>"$SCRATCH/inspect.err") ||
        { cat "$SCRATCH/inspect.err" >&2; fail "rmq-broker inspect"; }
    "$ROOT/.venv/bin/python" -c 'import json, sys
count, topic = int(sys.argv[1]), sys.argv[2]
records = [json.loads(line) for line in sys.stdin if line.strip()]
keys = sorted(r["keys"] for r in records)
assert len(records) == count, f"{len(records)} records of {topic}, expected {count}"
assert keys == sorted(f"quick-{i}" for i in range(count)), f"keys {keys}"
assert all(r["crc_ok"] and r["body_length"] == 256 and r["topic"] == topic for r in records)
' "$MESSAGES" "$topic" <<<"$out" || fail "the store does not hold the messages of $topic"
    say "inspect reads back all $MESSAGES messages of $topic"
}

# Opt-in (RMQ_CONTAINER_TEST_SPARK=1; adds about two minutes): the spark target exports the
# stopped broker's volume, mounted read-only, to Parquet, and the host counts the rows.
check_spark_export() {
    local spark_image=localhost/rmq-broker-spark:container-test
    say "building $spark_image"
    podman build --quiet --format docker --network host --pull=never --target spark \
        --build-arg "PYTHON_IMAGE=$BASE_IMAGE" -t "$spark_image" "$ROOT" \
        >"$SCRATCH/build-spark.log" 2>&1 ||
        { cat "$SCRATCH/build-spark.log" >&2; fail "podman build --target spark"; }
    install -d -o 10001 -g 10001 "$SCRATCH/exports"
    podman run --rm --network none -e SPARK_LOCAL_IP=127.0.0.1 \
        -v "$VOLUME:/var/lib/rmq-broker:ro" -v "$SCRATCH/exports:/exports" "$spark_image" \
        pipeline export --store-dir /var/lib/rmq-broker --out /exports/all \
        >"$SCRATCH/export.log" 2>&1 ||
        { tail -n 30 "$SCRATCH/export.log" >&2; fail "pipeline export in the spark image"; }
    "$ROOT/.venv/bin/python" -c 'import sys, pyarrow.parquet as pq
rows = pq.read_table(sys.argv[1]).num_rows
sys.exit(0 if rows == int(sys.argv[2]) else f"{rows} rows exported, expected {sys.argv[2]}")' \
        "$SCRATCH/exports/all" "$((2 * MESSAGES))" || fail "the Parquet export is incomplete"
    say "the spark image exported all $((2 * MESSAGES)) messages to Parquet"
}

COMPOSE_PROJECT=rmq-cluster
COMPOSE_PORTS=(9876 9877 10911 10921 10931 5557 5558 5559)

compose() {
    "$COMPOSE_VENV/bin/podman-compose" --podman-path "$(command -v podman)" \
        -f "$HERE/docker-compose.cluster.yml" -f "$SCRATCH/compose.override.yml" "$@"
}

# The cluster file publishes fixed ports and asks for a nofile limit of 65536; this VM may grant
# less, so an override (this run only) lowers it. A service's own ulimits replace podman's
# default_ulimits, so nproc is lowered there too. Everything else is the file users run.
# podman 4.3 has no `podman compose`: podman-compose, at its pin in constraints.txt, goes into a
# venv of its own in the cache (not the project's), made once per pin.
install_podman_compose() {
    local cache=${RMQ_CONTAINER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rmq-broker} pin
    pin=$(grep -m1 '^podman-compose==' "$ROOT/constraints.txt") ||
        fail "constraints.txt pins no podman-compose"
    COMPOSE_VENV=$cache/venv-${pin/==/-}
    [[ -x $COMPOSE_VENV/bin/podman-compose ]] && return 0
    say "installing $pin into $COMPOSE_VENV"
    rm -rf "$COMPOSE_VENV"
    { "$ROOT/.venv/bin/python" -m venv "$COMPOSE_VENV" &&
        "$COMPOSE_VENV/bin/pip" install -q -c "$ROOT/constraints.txt" "$pin"; } \
        >"$SCRATCH/pip.log" 2>&1 ||
        { cat "$SCRATCH/pip.log" >&2; rm -rf "$COMPOSE_VENV"; cannot_run "pip install $pin"; }
}

start_compose_cluster() {
    install_podman_compose
    local port nofile
    for port in "${COMPOSE_PORTS[@]}"; do
        "$ROOT/.venv/bin/python" -c 'import socket, sys
socket.create_server(("0.0.0.0", int(sys.argv[1]))).close()' "$port" 2>/dev/null ||
            cannot_run "port $port (published by the compose cluster) is in use"
    done
    nofile=$(ulimit -Hn)
    [[ $nofile == unlimited ]] || ((nofile <= 65536)) || nofile=65536
    [[ $nofile == unlimited ]] && nofile=65536
    cat >"$SCRATCH/compose.override.yml" <<EOF
services:
  broker-a:
    ulimits: {nofile: {soft: $nofile, hard: $nofile}, nproc: 32768}
  broker-b:
    ulimits: {nofile: {soft: $nofile, hard: $nofile}, nproc: 32768}
  broker-a-slave:
    ulimits: {nofile: {soft: $nofile, hard: $nofile}, nproc: 32768}
EOF
    # The image the compose file names is the one built above: no second build.
    podman tag "$IMAGE" rmq-broker:0.1.0
    say "starting the compose cluster (2 name servers, broker-a with a slave, broker-b)"
    COMPOSE_UP=1
    compose up -d --no-build >"$SCRATCH/compose-up.log" 2>&1 ||
        { tail -n 30 "$SCRATCH/compose-up.log" >&2; fail "podman-compose up"; }
}

check_compose_cluster() {
    local summary
    summary=$(timeout 180 "$ROOT/.venv/bin/python" "$HERE/compose_check.py" \
        --namesrv 127.0.0.1:9876 --namesrv 127.0.0.1:9877 \
        --broker broker-a=127.0.0.1:10911 --broker broker-b=127.0.0.1:10921 \
        --slave broker-a=127.0.0.1:10931 \
        --topic "${TOPIC}Cluster" --count "$MESSAGES" --timeout 90) ||
        fail "compose cluster: $summary"
    say "compose cluster: both name servers list both groups and the slave; $MESSAGES sent to each group, all consumed; broker-a's on its slave"
    compose down -v -t 30 >"$SCRATCH/compose-down.log" 2>&1 ||
        { cat "$SCRATCH/compose-down.log" >&2; fail "podman-compose down"; }
    COMPOSE_UP=
    say "compose cluster taken down"
}

main() {
    local started=$SECONDS
    preflight
    configure_podman
    trap cleanup EXIT
    bootstrap_base
    build_image
    PORT=$(free_port)
    METRICS_PORT=$(free_port)
    VOLUME=rmq-container-test-store
    podman volume create "$VOLUME" >/dev/null

    start_broker rmq-first
    send_messages "${TOPIC}First"
    check_metrics
    check_healthcheck
    stop_broker

    # Same volume: a clean restart, then the old messages read from a second container while
    # the broker runs, new ones sent, and both read back after the second stop.
    start_broker rmq-second
    check_store_holds "${TOPIC}First"
    send_messages "${TOPIC}Second"
    stop_broker
    if grep -q commit_log_truncated "$SCRATCH/rmq-second.log"; then
        fail "recovery after a clean shutdown truncated the commit log"
    fi
    check_store_holds "${TOPIC}First"
    check_store_holds "${TOPIC}Second"
    if [[ ${RMQ_CONTAINER_TEST_SPARK:-} == 1 ]]; then
        check_spark_export
    fi
    if [[ ${RMQ_CONTAINER_TEST_COMPOSE:-} != skip ]]; then
        local compose_started=$SECONDS
        start_compose_cluster
        check_compose_cluster
        say "the compose step took $((SECONDS - compose_started)) s"
    fi

    say "passed in $((SECONDS - started)) s"
}

main "$@"
