#!/usr/bin/env bash
# System packages of the power-cut file system tests (tests/powercut): the FUSE 3 library and
# fusermount3 at run time, its headers and pkg-config to build pyfuse3 from source when pip
# installs the test extras. Run by `make install-test` before pip; does nothing when all are
# present. Installs the missing ones with apt-get as root; anywhere else it names them and fails.
set -euo pipefail
# shellcheck source=tests/apt-missing.sh
source "$(dirname "${BASH_SOURCE[0]}")/../apt-missing.sh"

if command -v fusermount3 >/dev/null && command -v pkg-config >/dev/null &&
    pkg-config --exists fuse3; then
    exit 0
fi
install_missing install-fuse "install FUSE 3 (library, headers, fusermount3)" \
    fuse3 libfuse3-dev pkg-config
