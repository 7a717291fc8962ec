# Two entry points, both safe on a fresh clone: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STORE_DIR ?= $(CURDIR)/.store
ARGS ?=

.PHONY: run test lint typecheck unit soak bench clean install-run install-test test-container

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required"'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Stamps re-run the install whenever the project metadata or the pins change.
$(VENV)/.run-installed: pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q -c constraints.txt -e .
	$(PY) -m protocol.v2.build
	touch $@

# pyfuse3 (the power-cut file system of tests/powercut) builds against the system's libfuse3;
# the dashboard's browser test drives the system's Chromium.
$(VENV)/.test-installed: pyproject.toml constraints.txt | $(PY)
	bash tests/powercut/install-fuse.sh
	bash tests/install-chromium.sh
	PYTHON=$(PYTHON) bash tests/grpc/install-client.sh
	bash tests/grpc/install-node-client.sh
	$(PIP) install -q -c constraints.txt -e '.[test,spark,bench]'
	$(PY) -m protocol.v2.build
	touch $@ $(VENV)/.run-installed

install-run: $(VENV)/.run-installed
install-test: $(VENV)/.test-installed

run: install-run
	$(VENV)/bin/rmq-broker serve --listen 127.0.0.1:10911 --store-dir $(STORE_DIR) \
		--flush-disk-type ASYNC_FLUSH $(ARGS)

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install-test
	$(VENV)/bin/mypy --strict

# The suite runs in PYTEST_WORKERS processes (pytest-xdist): most of its time is spent waiting
# on broker subprocesses, clients and disks. `--dist loadgroup` keeps each xdist_group in one
# process, one test at a time: the power-cut, full-disk and kill-cycle tests never run beside
# each other, and the Spark tests share one JVM (tests/conftest.py). PYTEST_WORKERS=0 runs the
# suite in this process.
PYTEST_WORKERS ?= 2

unit: install-test
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(ARGS)

test: lint typecheck unit

soak: install-test
	RMQ_SOAK=1 $(PY) -m pytest --timeout 3600 tests/integration tests/reliability tests/powercut $(ARGS)

bench: install-test
	$(PY) bench/codec.py
	$(PY) bench/store.py
	$(PY) bench/sql_filter.py

# Builds the image with podman and runs it end to end (see deploy/README.md).
test-container: install-test
	bash deploy/container-test.sh

clean:
	rm -rf $(VENV) .store .mypy_cache .pytest_cache .ruff_cache build *.egg-info
