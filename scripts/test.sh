#!/usr/bin/env bash
# The whole test suite on a fresh machine: formatting, lints, every test.
# Installs or starts what the tests need; stops only what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# A build cache outside the clone (also set in .cargo/config.toml) keeps a second run fast.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ledger-outbox/target}"
mkdir -p "$CARGO_TARGET_DIR"
# In CI a missing service or contracts folder is a failure, never a silent skip.
if [ -n "${CI:-}" ]; then export OUTBOX_TEST_REQUIRE=1; fi
export OUTBOX_CONTRACTS_DIR="${OUTBOX_CONTRACTS_DIR:-$(cd .. && pwd)/shared/contracts}"

step() { printf '\n==> %s\n' "$*"; }

step "PostgreSQL: logical decoding and loopback replication for the CDC tests"
bash scripts/postgres-setup.sh

step "RabbitMQ on 127.0.0.1:5672 (started if it is not running)"
if ! rabbitmqctl -q status >/dev/null 2>&1; then
    rabbitmq-server -detached
fi
# An app left stopped by an interrupted restart test is started again.
rabbitmqctl -q start_app >/dev/null 2>&1 || true
rabbitmqctl -q await_startup --timeout 120

step "NATS with JetStream on 127.0.0.1:4222 (installed and started if missing)"
# The examples/nats-transport suite uses the shared server, and starts servers of its
# own from this binary for its restart case.
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
    apt-get install -y nats-server >/dev/null || { apt-get update >/dev/null && apt-get install -y nats-server >/dev/null; }
fi
export OUTBOX_NATS_SERVER="${OUTBOX_NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}"
if ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
    nats_dir=/var/cache/ledger-outbox/nats
    mkdir -p "$nats_dir/store"
    "$OUTBOX_NATS_SERVER" -a 127.0.0.1 -p 4222 -js -sd "$nats_dir/store" -l "$nats_dir/nats-server.log" &
    nats_pid=$!
    for _ in $(seq 1 100); do
        (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null && break
        sleep 0.1
    done
    (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null || { echo "nats-server did not start (see $nats_dir/nats-server.log)" >&2; exit 1; }
fi

step "Kafka-protocol broker: Tansu 0.6.0 on 127.0.0.1:9092 (installed once into the cache)"
export OUTBOX_TANSU_ROOT="${OUTBOX_TANSU_ROOT:-/var/cache/ledger-outbox/tansu}"
bash scripts/tansu.sh install
bash scripts/tansu.sh start 9092
# Stops only a broker this script started (its PID file); a broker already running is left alone.
# Likewise a nats-server this script started (its PID), never the machine's own.
trap 'bash scripts/tansu.sh stop 9092; [ -n "${nats_pid:-}" ] && kill "$nats_pid" 2>/dev/null || true' EXIT
export OUTBOX_KAFKA_BROKERS="${OUTBOX_KAFKA_BROKERS:-127.0.0.1:9092}"

step "promtool for the alert rule tests (Debian's prometheus package, unpacked once into the cache)"
export OUTBOX_PROMTOOL_ROOT="${OUTBOX_PROMTOOL_ROOT:-/var/cache/ledger-outbox/promtool}"
bash scripts/promtool.sh install
export OUTBOX_PROMTOOL="$OUTBOX_PROMTOOL_ROOT/usr/bin/promtool"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo doc (workspace, all features, warnings are errors)"
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --all-features

step "cargo test (workspace, all features)"
# --no-fail-fast: one failing test binary does not hide the others' results.
set +e
cargo test --workspace --all-features --no-fail-fast 2>&1 | tee "${TMPDIR:-/tmp}/outbox-test.log"
status=${PIPESTATUS[0]}
set -e
grep -E '^test result:' "${TMPDIR:-/tmp}/outbox-test.log" | awk '{p+=$4; f+=$6} END {printf "\nworkspace: %d passed, %d failed\n", p, f}'
exit "$status"
