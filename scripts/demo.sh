#!/usr/bin/env bash
# The end-to-end demo on the embedded default: SQLite + the local dev ledger.
# Needs only Rust (cargo); no service has to be running. Extra arguments go to
# `outbox demo` (for example --payouts 5000 --merchants 200).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ledger-outbox/target}"
mkdir -p "$CARGO_TARGET_DIR"
exec cargo run --quiet -p outbox-bins -- demo "$@"
