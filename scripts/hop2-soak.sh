#!/usr/bin/env bash
# Hop 2's memory under steady load: release builds of `outbox fanout` (SQLite fan-out
# store, publishing to RabbitMQ) and `outbox consume` (the reference treasury
# consumer, inbox on SQLite), fed by the real chain: a feeder enqueues CHUNK events
# per transaction (`outbox enqueue`, over 1,000 accounts) with a 50 ms pause, an
# `outbox relay` posts them to `outbox dev-ledger`, whose signed webhooks reach the
# fan-out. Runs for SECONDS_TO_RUN seconds and prints the resident set (VmRSS) and
# peak (VmHWM) of the fan-out and the consumer (and, for context, of the relay and the
# dev ledger) every 10 s; then the offered rate, and checks that the consumer applied
# every event once the feeder stops. Nothing about time or memory is asserted; the
# README quotes the figures.
#
#   scripts/hop2-soak.sh                    # SECONDS_TO_RUN=600 CHUNK=500
#
# Needs RabbitMQ on 127.0.0.1:5672 (guest/guest). The exchange and its queues are
# named after the run and deleted at the end; only processes started here are ended.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/soak-feed.sh
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ledger-outbox/target}"
SECONDS_TO_RUN="${SECONDS_TO_RUN:-600}"
CHUNK="${CHUNK:-500}"
QUEUES=8
SECRET="hop2-soak-webhook-secret"

cargo build -q --release -p outbox-bins --no-default-features --features sqlite,http,dev-ledger,amqp
bin="$CARGO_TARGET_DIR/release/outbox"

work="$(mktemp -d)"
exchange="hop2-soak-$$"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    for i in $(seq 0 $((QUEUES - 1))); do
        rabbitmqctl -q delete_queue "$exchange.$i" >/dev/null 2>&1 || true
    done
    rabbitmqadmin delete exchange name="$exchange" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Waits (bounded, 30 s) until something listens on 127.0.0.1:$1.
wait_port() {
    for _ in $(seq 1 300); do
        if python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1 after 30 s ($2; its log: $work/$2.log)" >&2
    cat "$work/$2.log" >&2 || true
    exit 1
}

write_soak_chunk "$work/chunk.jsonl" "$CHUNK"
outbox_db="sqlite://$work/outbox.db"
"$bin" migrate --database "$outbox_db" >/dev/null

ledger_port=$(free_port)
fanout_port=$(free_port)
amqp="amqp://guest:guest@127.0.0.1:5672/%2f?exchange=$exchange&queues=$QUEUES"

"$bin" fanout --listen "127.0.0.1:$fanout_port" --database "sqlite://$work/fanout.db" \
    --secret "$SECRET" --to "$amqp" > "$work/fanout.log" 2>&1 &
fanout=$!
pids+=("$fanout")
wait_port "$fanout_port" fanout

"$bin" consume --from "$amqp" --database "sqlite://$work/treasury.db" > "$work/consume.log" 2>&1 &
consume=$!
pids+=("$consume")

"$bin" dev-ledger --listen "127.0.0.1:$ledger_port" --data "$work/ledger.db" --ledger soak \
    --webhook "http://127.0.0.1:$fanout_port/webhooks/ledger" --webhook-secret "$SECRET" \
    > "$work/dev-ledger.log" 2>&1 &
ledger=$!
pids+=("$ledger")
wait_port "$ledger_port" dev-ledger

"$bin" relay --database "$outbox_db" --ledger-url "http://127.0.0.1:$ledger_port" \
    --ledger-name soak > "$work/relay.log" 2>&1 &
relay=$!
pids+=("$relay")

alive() {
    for pid in "$fanout" "$consume" "$ledger" "$relay"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "a process exited during the soak (pid $pid); logs in $work:" >&2
            tail -n 20 "$work"/*.log >&2
            exit 1
        fi
    done
}

cat > "$work/count.py" <<'PY'
import sqlite3, sys
def count(path, sql):
    try:
        return sqlite3.connect(path).execute(sql).fetchone()[0]
    except sqlite3.Error:
        return 0
work = sys.argv[1]
print(count(f"{work}/outbox.db", "SELECT count(*) FROM outbox_events"),
      count(f"{work}/treasury.db", "SELECT count(*) FROM inbox_messages"))
PY
counts() { python3 "$work/count.py" "$work"; }
# Memory of each process, then how far the chain got: events enqueued, and applied
# by the consumer (the gap is what is still in flight somewhere in the chain).
sample() {
    printf '%4s %s   %s   %s   %s   %s\n' "$1" "$(memory "$fanout")" "$(memory "$consume")" "$(memory "$relay")" "$(memory "$ledger")" "$(counts)"
}

echo "hop 2 soak: ${SECONDS_TO_RUN} s, $CHUNK events per enqueue transaction; relay → dev ledger → webhooks → fan-out (SQLite) → RabbitMQ ($QUEUES queues) → consumer (SQLite)"
echo "        fan-out kB         consumer kB        relay kB           dev ledger kB      events"
echo "   s    rss     peak       rss     peak       rss     peak       rss     peak       enqueued applied"
# Each sample first checks that the chain is still whole.
checked_sample() {
    alive
    sample "$1"
}
feed_for "$SECONDS_TO_RUN" "$outbox_db" "$work/chunk.jsonl" checked_sample
# Bounded: the chain catches up within 300 s or the script says so.
caught_up_from=$SECONDS
for _ in $(seq 1 3000); do
    read -r events applied <<< "$(counts)"
    [ "$events" = "$applied" ] && break
    alive
    sleep 0.1
done
sample end
read -r events applied <<< "$(counts)"
echo "offered $events events ($((events / SECONDS_TO_RUN))/s); applied by the consumer $applied, $((SECONDS - caught_up_from)) s after the feeder stopped"
if [ "$events" != "$applied" ]; then
    echo "the consumer did not apply every event within 300 s of the feeder's end" >&2
    exit 1
fi
