#!/usr/bin/env bash
# System packages of the dashboard's browser test (tests/integration/test_dashboard_browser.py):
# Debian's headless-capable Chromium and a font for the page's text. Run by `make install-test`
# before pip; does nothing when chromium is on the PATH. Installs the missing packages with
# apt-get as root; anywhere else it names them and fails.
set -euo pipefail
# shellcheck source=tests/apt-missing.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-missing.sh"

if command -v chromium >/dev/null; then
    exit 0
fi
install_missing install-chromium "install Chromium so that 'chromium' is on the PATH" \
    chromium fonts-dejavu-core
