# shellcheck shell=bash
# Sourced by the install scripts of the tests' system packages (tests/install-chromium.sh,
# tests/powercut/install-fuse.sh, tests/grpc/install-node-client.sh): install_missing NAME HINT
# PACKAGE... installs the packages dpkg does not list as installed, with apt-get as root;
# without apt-get or root it names them and fails. HINT says what to install by hand where there
# is no apt-get.

install_missing() {
    local name=$1 hint=$2
    shift 2
    local missing=() package
    for package in "$@"; do
        if ! dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$package")
        fi
    done
    if ((${#missing[@]} == 0)); then
        printf '%s: %s are installed, but not found where expected\n' "$name" "$*" >&2
        return 1
    fi
    if ! command -v apt-get >/dev/null; then
        printf '%s: missing %s and no apt-get: %s\n' "$name" "${missing[*]}" "$hint" >&2
        return 1
    fi
    if ((EUID != 0)); then
        printf "%s: missing %s: run 'sudo apt-get install %s' first\n" \
            "$name" "${missing[*]}" "${missing[*]}" >&2
        return 1
    fi
    printf '%s: installing %s\n' "$name" "${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}
