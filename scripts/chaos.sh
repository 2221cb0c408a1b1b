#!/usr/bin/env bash
# The crash-and-fault campaign (issue 15): the real `outbox relay` binary against the
# dev ledger on loopback, on SQLite and PostgreSQL, each scenario ended by the auditor;
# on Hop 2 the real `outbox fanout` and `outbox consume` over HTTP, RabbitMQ (its app
# stopped) and Kafka (a Tansu of the test's own on SQLite storage, SIGKILLed).
#
#   scripts/chaos.sh [short|long]      short (default) is what `cargo test` runs
#
# Prints one CHAOS line per scenario: seed, events, crash points, missing, doubled,
# out of order, discrepancies. OUTBOX_TEST_SEED=N replays a run's randomness.
# Every loop is bounded; the script stops only the processes the tests start.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ledger-outbox/target}"

profile="${1:-short}"
case "$profile" in
    short | long) ;;
    *) echo "usage: scripts/chaos.sh [short|long] (not '$profile')" >&2; exit 2 ;;
esac
export OUTBOX_CHAOS_PROFILE="$profile"
# The campaign is a claim about both stores and every broker: a missing PostgreSQL,
# RabbitMQ or Tansu binary is a failure here.
export OUTBOX_TEST_REQUIRE=1

echo "==> PostgreSQL on 127.0.0.1:5432 with logical decoding (for the CDC relay)"
bash scripts/postgres-setup.sh

echo "==> Tansu 0.6.0 with SQLite storage, for the Kafka broker kill (installed once into the cache)"
# The scenario starts and SIGKILLs a broker of its own on a free port; the shared
# 127.0.0.1:9092 broker is not needed or touched.
export OUTBOX_TANSU_ROOT="${OUTBOX_TANSU_ROOT:-/var/cache/ledger-outbox/tansu}"
bash scripts/tansu.sh install

echo "==> the outbox binary (debug, every feature) and the campaign"
cargo build -p outbox-bins --features all
cargo test -p outbox-tests --test chaos --test chaos_hop2 --test chaos_hostile --no-run

echo "==> the $profile profile"
log="${TMPDIR:-/tmp}/outbox-chaos-$profile.log"
# One scenario at a time on the long profile: on 2 cores they would slow each other.
threads=2
if [ "$profile" = long ]; then threads=1; fi
set +e
cargo test -p outbox-tests --test chaos --test chaos_hop2 --test chaos_hostile -- --nocapture --test-threads "$threads" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo
echo "==> figures ($profile profile; full log in $log)"
grep '^CHAOS ' "$log" || echo "no scenario printed its figures"
exit "$status"
