#!/usr/bin/env bash
# The relay's memory under steady load: a release `outbox relay` daemon on a SQLite
# outbox (synchronous=FULL) posting to the null ledger the relay benchmark uses, while
# a feeder enqueues CHUNK events per transaction (`outbox enqueue`, one process each,
# over 1,000 accounts) as fast as it can with a 50 ms pause, for SECONDS seconds.
# Prints the relay's resident set (VmRSS) and peak (VmHWM) every 10 s, then the
# offered rate, and checks that every event was delivered once the feeder stops.
# Nothing about time or memory is asserted; the README quotes the figures.
#
#   scripts/relay-soak.sh                   # SECONDS_TO_RUN=600 CHUNK=500
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/null-ledger.sh
. scripts/soak-feed.sh
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ledger-outbox/target}"
SECONDS_TO_RUN="${SECONDS_TO_RUN:-600}"
CHUNK="${CHUNK:-500}"

cargo build -q --release -p outbox-bins --no-default-features --features sqlite
cargo build -q --release -p outbox-testkit --example null_ledger
bin="$CARGO_TARGET_DIR/release/outbox"

work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}" ${NULL_LEDGER_PID:-}; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

write_soak_chunk "$work/chunk.jsonl" "$CHUNK"
db="sqlite://$work/outbox.db"
"$bin" migrate --database "$db" >/dev/null

start_null_ledger "$work"
url=$NULL_LEDGER_URL

"$bin" relay --database "$db" --ledger-url "$url" --ledger-name soak > "$work/relay.log" 2>&1 &
relay=$!
pids+=("$relay")

# The relay's VmRSS and VmHWM after LABEL (seconds, or "end").
sample() { printf '%4s %s\n' "$1" "$(memory "$relay")"; }

echo "relay soak: ${SECONDS_TO_RUN} s, $CHUNK events per enqueue transaction, SQLite, null ledger"
echo "   s    rss kB  peak kB"
feed_for "$SECONDS_TO_RUN" "$db" "$work/chunk.jsonl" sample
# Events enqueued and events delivered: "EVENTS DELIVERED".
cat > "$work/count.py" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
events = c.execute("SELECT count(*) FROM outbox_events").fetchone()[0]
done = c.execute("SELECT count(DISTINCT event_id) FROM outbox_deliveries WHERE outcome = 'accepted'").fetchone()[0]
print(events, done)
PY
counts() { python3 "$work/count.py" "$work/outbox.db"; }
# Bounded: the relay catches up within 120 s or the script says so.
for _ in $(seq 1 1200); do
    read -r events delivered <<< "$(counts)"
    [ "$events" = "$delivered" ] && break
    sleep 0.1
done
sample end
read -r events delivered <<< "$(counts)"
echo "offered $events events ($((events / SECONDS_TO_RUN))/s); delivered $delivered"
if [ "$events" != "$delivered" ]; then
    echo "not every event was delivered within 120 s of the feeder's end" >&2
    exit 1
fi
