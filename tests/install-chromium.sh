#!/usr/bin/env bash
# System packages of the dashboard's browser test (tests/integration/test_dashboard_browser.py):
# Debian's headless-capable Chromium and a font for the page's text. Run by `make install-test`
# before pip; does nothing when chromium is on the PATH. Installs the missing packages with
# apt-get as root; anywhere else it names them and fails.
set -euo pipefail

PACKAGES=(chromium fonts-dejavu-core)

say() { printf 'install-chromium: %s\n' "$*" >&2; }

if command -v chromium >/dev/null; then
    exit 0
fi
missing=()
for package in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$package")
    fi
done
if ((${#missing[@]} == 0)); then
    say "chromium is installed, but no chromium is found on the PATH"
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    say "missing ${missing[*]} and no apt-get: install Chromium so that 'chromium' is on the PATH"
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
