#!/usr/bin/env bash
# How much slower a debug `outbox` drains than a release one, measured in one run:
# `outbox relay --once` over the same SQLite outbox (EVENTS events over ACCOUNTS
# accounts, synchronous=FULL) against the null ledger the relay benchmark uses
# (bins/benches/relay.rs), the debug binary then the release binary, ROUNDS times.
# Prints each drain and the median ratio. Nothing is asserted; the README quotes it.
#
#   scripts/measure-debug-vs-release.sh            # EVENTS=20000 ACCOUNTS=1000 ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/null-ledger.sh
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ledger-outbox/target}"
EVENTS="${EVENTS:-20000}"
ACCOUNTS="${ACCOUNTS:-1000}"
ROUNDS="${ROUNDS:-3}"
# The SQLite relay deployment of the README's "Production install".
FEATURES=(--no-default-features --features sqlite)

cargo build -q -p outbox-bins "${FEATURES[@]}"
cargo build -q --release -p outbox-bins "${FEATURES[@]}"
cargo build -q --release -p outbox-testkit --example null_ledger

work="$(mktemp -d)"
cleanup() {
    if [ -n "${NULL_LEDGER_PID:-}" ]; then kill "$NULL_LEDGER_PID" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# One outbox, enqueued once and copied for every drain: each drain sees the same rows.
awk -v n="$EVENTS" -v m="$ACCOUNTS" 'BEGIN {
    for (i = 0; i < n; i++) {
        a = i % m
        printf "{\"account\":\"merchants:%d\",\"postings\":[{\"source\":\"world\",\"destination\":\"merchants:%d:available\",\"amount\":%d,\"asset\":\"USD/2\"}],\"metadata\":{\"event_type\":\"bench\"}}\n", a, a, 1000 + i
    }
}' > "$work/payouts.jsonl"
release="$CARGO_TARGET_DIR/release/outbox"
debug="$CARGO_TARGET_DIR/debug/outbox"
"$release" migrate --database "sqlite://$work/outbox.db" >/dev/null
"$release" enqueue --database "sqlite://$work/outbox.db" --file "$work/payouts.jsonl" >/dev/null

start_null_ledger "$work"
url=$NULL_LEDGER_URL

# Seconds one drain of a fresh copy of the outbox takes with the given binary.
drain() {
    local binary="$1" db="$work/drain-$RANDOM$RANDOM.db" start end out
    cp "$work/outbox.db" "$db"
    start="$(date +%s.%N)"
    out="$("$binary" relay --once --database "sqlite://$db" --ledger-url "$url" \
        --ledger-name bench --poll-interval-ms 10)"
    end="$(date +%s.%N)"
    case "$out" in
        *"accepted $EVENTS,"*) ;;
        *) echo "unexpected relay summary: $out" >&2; exit 1 ;;
    esac
    rm -f "$db" "$db"-* "$db".relay-*
    awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }'
}

echo "outbox relay --once: $EVENTS events over $ACCOUNTS accounts from SQLite to the null ledger (features: ${FEATURES[*]})"
printf '%-6s %10s %10s %8s\n' round "debug s" "release s" ratio
ratios=()
for round in $(seq 1 "$ROUNDS"); do
    d="$(drain "$debug")"
    r="$(drain "$release")"
    ratio="$(awk -v d="$d" -v r="$r" 'BEGIN { printf "%.2f", d / r }')"
    ratios+=("$ratio")
    printf '%-6s %10s %10s %8s\n' "$round" "$d" "$r" "$ratio"
    awk -v d="$d" -v r="$r" -v n="$EVENTS" 'BEGIN { printf "       %10.0f %10.0f   events/s\n", n / d, n / r }'
done
median="$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
echo "median: a debug build drains ${median}x slower than a release build"
