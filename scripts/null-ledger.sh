# Sourced by the measurement scripts (measure-debug-vs-release.sh, relay-soak.sh):
# starts the benchmarks' null ledger, already built in release, with its output in
# DIR/ledger.out, and sets NULL_LEDGER_PID and NULL_LEDGER_URL once it serves.
start_null_ledger() {
    "$CARGO_TARGET_DIR/release/examples/null_ledger" > "$1/ledger.out" &
    NULL_LEDGER_PID=$!
    NULL_LEDGER_URL=""
    for _ in $(seq 1 100); do
        NULL_LEDGER_URL="$(sed -n 's/^listening on //p' "$1/ledger.out")"
        [ -n "$NULL_LEDGER_URL" ] && return 0
        sleep 0.1
    done
    echo "the null ledger did not start" >&2
    exit 1
}
