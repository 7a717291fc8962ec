# rmq-broker images.
#
#   docker build -t rmq-broker .                        # the broker (default target)
#   docker build --target spark -t rmq-broker-spark .   # + pyspark, pyarrow and a Java 17 JRE
#
# Dependencies are installed from the pins in constraints.txt before any source is copied, so a
# code change rebuilds only the last layers. Configuration is RMQ_* environment variables, a TOML
# file (RMQ_CONFIG or --config) and flags after the image name; see deploy/README.md.

# Pinned to bookworm: the bare -slim tags follow the newest Debian release.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- the venv with the runtime dependencies only --------------------------------------------
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/rmq-broker
WORKDIR /src
RUN python3 -m venv "$VIRTUAL_ENV"
COPY pyproject.toml constraints.txt ./
# The dependency list comes from pyproject.toml, the versions from constraints.txt.
RUN python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
        > requirements.txt \
    && "$VIRTUAL_ENV/bin/pip" install --no-cache-dir -c constraints.txt -r requirements.txt

# --- the same venv plus the spark extra ------------------------------------------------------
FROM deps AS deps-spark
RUN python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["spark"], sep="\n")' \
        > requirements-spark.txt \
    && "$VIRTUAL_ENV/bin/pip" install --no-cache-dir -c constraints.txt -r requirements-spark.txt

# --- the project as a wheel (a wheel, not an editable install: Spark finds the
# pyspark_commitlog shim only on a real sys.path entry) --------------------------------------
FROM deps AS wheel
COPY . .
# The RocketMQ 5 gRPC bindings are copied out of the official client's pinned wheel.
RUN "$VIRTUAL_ENV/bin/python" -m protocol.v2.build \
    && "$VIRTUAL_ENV/bin/pip" wheel --no-cache-dir --no-deps -c constraints.txt -w /wheels .

FROM deps AS venv
COPY --from=wheel /wheels /wheels
RUN "$VIRTUAL_ENV/bin/pip" install --no-cache-dir --no-deps /wheels/*.whl

FROM deps-spark AS venv-spark
COPY --from=wheel /wheels /wheels
RUN "$VIRTUAL_ENV/bin/pip" install --no-cache-dir --no-deps /wheels/*.whl

# --- what both runtime images share ----------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/rmq-broker/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    RMQ_LISTEN=0.0.0.0:10911 \
    RMQ_METRICS_LISTEN=0.0.0.0:5557 \
    RMQ_GRPC_LISTEN=0.0.0.0:8081 \
    RMQ_STORE_PATH_ROOT_DIR=/var/lib/rmq-broker
# A fixed uid/gid so volumes and Kubernetes' fsGroup can name it.
RUN groupadd --system --gid 10001 rmq \
    && useradd --system --uid 10001 --gid rmq --create-home --home-dir /home/rmq \
        --shell /usr/sbin/nologin rmq \
    && install -d -o rmq -g rmq -m 0750 /var/lib/rmq-broker
WORKDIR /home/rmq

# --- the Spark pipeline jobs: `rmq-broker pipeline export --store-dir ... --out ...` --------
FROM runtime AS spark
# The JRE's postinst writes man-page links; slim images drop /usr/share/man/man1.
# Debian's point releases replace package versions, so an exact pin would break rebuilds.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
COPY --from=venv-spark /opt/rmq-broker /opt/rmq-broker
# Spark's Python workers must use the venv (pyarrow, the commitlog source), whatever PATH says.
ENV PYSPARK_PYTHON=/opt/rmq-broker/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/rmq-broker/bin/python
USER 10001:10001
ENTRYPOINT ["rmq-broker"]
CMD ["pipeline", "--help"]

# --- the broker (default target: keep it last) -----------------------------------------------
FROM runtime AS broker
COPY --from=venv /opt/rmq-broker /opt/rmq-broker
USER 10001:10001
# The whole store (commit log, checkpoint, config/topics.json, lock) lives on this volume.
VOLUME ["/var/lib/rmq-broker"]
# 10911: remoting (producers, and name-server requests answered by the broker itself);
# 5557: Prometheus /metrics.
EXPOSE 10911 5557 8081
# Through sh: the probed port follows RMQ_LISTEN, so -e RMQ_LISTEN=0.0.0.0:11911 keeps it right.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/bin/sh", "-c", "exec rmq-broker health --timeout 4 --addr \"127.0.0.1:${RMQ_LISTEN##*:}\""]
# Exec form: the broker is PID 1 and receives SIGTERM itself, then flushes and exits 0.
ENTRYPOINT ["rmq-broker", "serve"]
