#!/usr/bin/env bash
# System packages of the power-cut file system tests (tests/powercut): the FUSE 3 library and
# fusermount3 at run time, its headers and pkg-config to build pyfuse3 from source when pip
# installs the test extras. Run by `make install-test` before pip; does nothing when all are
# present. Installs the missing ones with apt-get as root; anywhere else it names them and fails.
set -euo pipefail

PACKAGES=(fuse3 libfuse3-dev pkg-config)

say() { printf 'install-fuse: %s\n' "$*" >&2; }

if command -v fusermount3 >/dev/null && command -v pkg-config >/dev/null &&
    pkg-config --exists fuse3; then
    exit 0
fi
missing=()
for package in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$package")
    fi
done
if ((${#missing[@]} == 0)); then
    say "fuse3, libfuse3-dev and pkg-config are installed, but fusermount3 or fuse3.pc is not found"
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    say "missing ${missing[*]} and no apt-get: install FUSE 3 (library, headers, fusermount3)"
    exit 1
fi
if ((EUID != 0)); then
    say "missing ${missing[*]}: run 'sudo apt-get install ${missing[*]}' first"
    exit 1
fi
say "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
