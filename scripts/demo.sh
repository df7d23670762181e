#!/usr/bin/env bash
# Runs the local stack on the built-in test clusters and shows an event become a ClusterProfile.
# Extra arguments go to `sluice demo` (for example --keep-running).
set -euo pipefail
cd "$(dirname "$0")/.."
NATS=$(bash scripts/install-nats.sh | tail -n 1)
export SLUICE_NATS_SERVER="$NATS"
cargo build --workspace --bins
exec target/debug/sluice demo "$@"
