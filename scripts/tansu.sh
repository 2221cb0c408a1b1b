#!/usr/bin/env bash
# Tansu, the Kafka-protocol broker the Kafka transport tests run against.
#
#   scripts/tansu.sh install        build tansu 0.6.0 into $OUTBOX_TANSU_ROOT (once)
#   scripts/tansu.sh start [port]   start a broker on 127.0.0.1:PORT (memory storage)
#   scripts/tansu.sh stop [port]    stop the broker this script started on PORT
#
# Loopback only. `stop` kills only the PID recorded by `start`, never by name.
set -euo pipefail

OUTBOX_TANSU_ROOT="${OUTBOX_TANSU_ROOT:-/var/cache/ledger-outbox/tansu}"
TANSU="$OUTBOX_TANSU_ROOT/bin/tansu"
TANSU_VERSION="0.6.0"
DEFAULT_PORT=9092
START_TIMEOUT_SECS=30

die() { printf 'tansu.sh: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

port_arg() {
    local port="${1:-$DEFAULT_PORT}"
    [[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "not a port: $port"
    printf '%s' "$port"
}

pid_file() { printf '%s/run/tansu-%s.pid' "$OUTBOX_TANSU_ROOT" "$1"; }
log_file() { printf '%s/run/tansu-%s.log' "$OUTBOX_TANSU_ROOT" "$1"; }

cmd_install() {
    if [[ -x "$TANSU" ]]; then
        echo "tansu already installed at $TANSU"
        return 0
    fi
    command -v cargo >/dev/null || die "cargo is needed to install tansu"
    mkdir -p "$OUTBOX_TANSU_ROOT"
    cargo install tansu --version "$TANSU_VERSION" --locked --features dynostore --debug \
        --root "$OUTBOX_TANSU_ROOT"
    [[ -x "$TANSU" ]] || die "cargo install finished but $TANSU is missing"
}

answers() {
    timeout 5 "$TANSU" topic list --broker "tcp://127.0.0.1:$1" >/dev/null 2>&1
}

cmd_start() {
    local port pidf logf pid
    port="$(port_arg "${1:-}")"
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
        --storage-engine memory://tansu/ \
        >"$logf" 2>&1 </dev/null &
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
    echo "tansu running on 127.0.0.1:$port (pid $pid, log $logf)"
}

cmd_stop() {
    local port pidf pid
    port="$(port_arg "${1:-}")"
    pidf="$(pid_file "$port")"
    if [[ ! -f "$pidf" ]]; then
        echo "no tansu started by this script on port $port"
        return 0
    fi
    pid="$(cat "$pidf")"
    [[ "$pid" =~ ^[0-9]+$ ]] || die "corrupt pid file $pidf"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -9 "$pid" 2>/dev/null || true
        fi
        echo "stopped tansu on port $port (pid $pid)"
    else
        echo "tansu on port $port (pid $pid) was not running"
    fi
    rm -f "$pidf"
}

case "${1:-}" in
    install) shift; cmd_install "$@" ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    *) usage ;;
esac
