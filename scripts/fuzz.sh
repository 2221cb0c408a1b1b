#!/usr/bin/env bash
# Runs one fuzz target (fuzz/fuzz_targets/TARGET.rs) for SECONDS on one core.
#
#   scripts/fuzz.sh TARGET SECONDS      e.g. scripts/fuzz.sh csv_statement 600
#   scripts/fuzz.sh --list              the targets
#
# Needs the nightly toolchain (rustup); installs cargo-fuzz into ~/.cargo/bin when it
# is missing. The kept corpus fuzz/corpus/TARGET is read, never written: what the run
# finds goes to a scratch corpus beside the build ($CARGO_TARGET_DIR/corpus/TARGET),
# so the repository's corpus stays small. A crash is saved under fuzz/artifacts/TARGET
# and the script fails; replay it with
#   cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-…
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# Instrumented builds are separate from the stable ones; keep them apart.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ledger-outbox/target-fuzz}"

if [ "${1:-}" = "--list" ]; then
    ls fuzz/fuzz_targets | sed 's/\.rs$//'
    exit 0
fi
if [ $# -ne 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/fuzz.sh TARGET SECONDS   (targets: scripts/fuzz.sh --list)" >&2
    exit 2
fi
target="$1"
seconds="$2"
if [ ! -f "fuzz/fuzz_targets/$target.rs" ]; then
    echo "no fuzz target \"$target\"; the targets are:" >&2
    ls fuzz/fuzz_targets | sed 's/\.rs$//' >&2
    exit 2
fi

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

scratch="$CARGO_TARGET_DIR/corpus/$target"
mkdir -p "$scratch"
cd fuzz
# -timeout: an input taking over 10 s is reported as a hang; -rss_limit_mb: so is
# runaway memory. One process (no -jobs/-workers): the machine has 2 cores.
exec cargo +nightly fuzz run --target-dir "$CARGO_TARGET_DIR" "$target" \
    "$scratch" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
