#!/usr/bin/env bash
# Tansu, the Kafka-protocol broker the Kafka transport tests run against.
#
#   scripts/tansu.sh install                  build tansu 0.6.0 into $OUTBOX_TANSU_ROOT (once)
#   scripts/tansu.sh start [port [storage]]   start a broker on 127.0.0.1:PORT
#   scripts/tansu.sh stop [port]              stop the broker this script started on PORT
#   scripts/tansu.sh kill [port]              SIGKILL it instead (a crash; storage kept)
#
# storage defaults to memory://tansu/ (gone with the process). sqlite://DIR/FILE keeps
# the log in a SQLite file that survives a kill; Tansu resolves it against the current
# directory (sqlite://./tansu.db is ./tansu.db). `start` again with the same port and
# storage after a `kill` is a broker restart. Loopback only. `stop` and `kill` signal
# only the PID recorded by `start`, never by name.
set -euo pipefail

OUTBOX_TANSU_ROOT="${OUTBOX_TANSU_ROOT:-/var/cache/ledger-outbox/tansu}"
TANSU="$OUTBOX_TANSU_ROOT/bin/tansu"
TANSU_VERSION="0.6.0"
# dynostore: the memory engine the suite's shared broker uses; libsql: the SQLite engine
# (`--storage-engine sqlite://PATH`) that survives a SIGKILL, for the broker-kill scenario.
TANSU_FEATURES="dynostore,libsql"
STAMP="$OUTBOX_TANSU_ROOT/bin/tansu.stamp"
DEFAULT_PORT=9092
START_TIMEOUT_SECS=30

die() { printf 'tansu.sh: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

port_arg() {
    local port="${1:-$DEFAULT_PORT}"
    [[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "not a port: $port"
    printf '%s' "$port"
}

pid_file() { printf '%s/run/tansu-%s.pid' "$OUTBOX_TANSU_ROOT" "$1"; }
log_file() { printf '%s/run/tansu-%s.log' "$OUTBOX_TANSU_ROOT" "$1"; }

# What an install is: the version and the cargo features built. Recorded next to the
# binary so an install from before the features changed (memory-only, no libsql) is noticed
# and rebuilt instead of failing later on `--storage-engine sqlite://...`.
install_stamp() { printf 'tansu %s features=%s\n' "$TANSU_VERSION" "$TANSU_FEATURES"; }

cmd_install() {
    if [[ -x "$TANSU" && -f "$STAMP" && "$(cat "$STAMP")" == "$(install_stamp)" ]]; then
        echo "tansu already installed at $TANSU ($(install_stamp))"
        return 0
    fi
    if [[ -x "$TANSU" ]]; then
        echo "tansu at $TANSU was built as '$(cat "$STAMP" 2>/dev/null || echo 'unknown (no stamp)')'; rebuilding as '$(install_stamp)'"
    fi
    command -v cargo >/dev/null || die "cargo is needed to install tansu"
    mkdir -p "$OUTBOX_TANSU_ROOT"
    cargo install tansu --version "$TANSU_VERSION" --locked --features "$TANSU_FEATURES" \
        --debug --force --root "$OUTBOX_TANSU_ROOT"
    [[ -x "$TANSU" ]] || die "cargo install finished but $TANSU is missing"
    install_stamp >"$STAMP"
}

answers() {
    timeout 5 "$TANSU" topic list --broker "tcp://127.0.0.1:$1" >/dev/null 2>&1
}

cmd_start() {
    local port storage pidf logf pid
    port="$(port_arg "${1:-}")"
    storage="${2:-memory://tansu/}"
    [[ -x "$TANSU" ]] || die "no tansu at $TANSU (run: $0 install)"
    pidf="$(pid_file "$port")"
    logf="$(log_file "$port")"
    mkdir -p "$(dirname "$pidf")"
    if [[ -f "$pidf" ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
        echo "tansu already running on 127.0.0.1:$port (pid $(cat "$pidf"))"
        return 0
    fi
    if answers "$port"; then
        # Someone else's broker (no pid file of ours): use it, and `stop` leaves it alone.
        echo "a Kafka broker already answers on 127.0.0.1:$port (not started by this script); using it"
        return 0
    fi
    local url="tcp://127.0.0.1:$port"
    nohup "$TANSU" broker \
        --listener-url "$url" \
        --advertised-listener-url "$url" \
        --storage-engine "$storage" \
        >>"$logf" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$pidf"
    local deadline=$((SECONDS + START_TIMEOUT_SECS))
    until answers "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pidf"
            tail -n 20 "$logf" >&2 || true
            die "tansu exited before answering on 127.0.0.1:$port (log: $logf)"
        fi
        if (( SECONDS >= deadline )); then
            kill "$pid" 2>/dev/null || true
            rm -f "$pidf"
            tail -n 20 "$logf" >&2 || true
            die "tansu did not answer on 127.0.0.1:$port within ${START_TIMEOUT_SECS}s (log: $logf)"
        fi
        sleep 0.5
    done
    echo "tansu running on 127.0.0.1:$port (pid $pid, storage $storage, log $logf)"
}

# The PID `start` recorded for PORT, or nothing when there is none.
started_pid() {
    local pidf="$1" pid
    [[ -f "$pidf" ]] || return 0
    pid="$(cat "$pidf")"
    [[ "$pid" =~ ^[0-9]+$ ]] || die "corrupt pid file $pidf"
    printf '%s' "$pid"
}

wait_gone() {
    for _ in $(seq 1 50); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# Ends the broker this script started on PORT: `stop` asks (SIGTERM, then SIGKILL
# after 5 s); `kill` SIGKILLs at once, so the broker gets no chance to flush or close
# and what it acknowledged is only still there if its storage is durable (sqlite://).
end_started() {
    local how="$1" port pidf pid
    port="$(port_arg "${2:-}")"
    pidf="$(pid_file "$port")"
    pid="$(started_pid "$pidf")"
    if [[ -z "$pid" ]]; then
        echo "no tansu started by this script on port $port"
        return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "tansu on port $port (pid $pid) was not running"
    elif [[ "$how" == stop ]]; then
        kill "$pid"
        wait_gone "$pid" || kill -9 "$pid" 2>/dev/null || true
        echo "stopped tansu on port $port (pid $pid)"
    else
        kill -9 "$pid"
        wait_gone "$pid" || die "tansu (pid $pid) survived SIGKILL"
        echo "killed tansu on port $port (pid $pid, SIGKILL)"
    fi
    rm -f "$pidf"
}

case "${1:-}" in
    install) shift; cmd_install "$@" ;;
    start) shift; cmd_start "$@" ;;
    stop | kill) end_started "$@" ;;
    *) usage ;;
esac
