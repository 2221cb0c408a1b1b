#!/usr/bin/env bash
# promtool, which checks and unit-tests the alert rules in docs/alerts.yaml.
#
#   scripts/promtool.sh install   extract Debian's promtool into $OUTBOX_PROMTOOL_ROOT (once)
#
# Only the binary is unpacked from the `prometheus` package (apt-get download, no
# install): no Prometheus server is installed or started.
set -euo pipefail

OUTBOX_PROMTOOL_ROOT="${OUTBOX_PROMTOOL_ROOT:-/var/cache/ledger-outbox/promtool}"
PROMTOOL="$OUTBOX_PROMTOOL_ROOT/usr/bin/promtool"

die() { printf 'promtool.sh: %s\n' "$*" >&2; exit 1; }

cmd_install() {
    if [[ -x "$PROMTOOL" ]]; then
        echo "promtool already installed at $PROMTOOL"
        return 0
    fi
    command -v apt-get >/dev/null || die "apt-get is needed to fetch Debian's prometheus package"
    mkdir -p "$OUTBOX_PROMTOOL_ROOT/deb"
    (cd "$OUTBOX_PROMTOOL_ROOT/deb" && apt-get download prometheus) \
        || { apt-get update -qq && (cd "$OUTBOX_PROMTOOL_ROOT/deb" && apt-get download prometheus); } \
        || die "cannot download the prometheus package"
    dpkg-deb -x "$(ls "$OUTBOX_PROMTOOL_ROOT"/deb/prometheus_*.deb | head -n 1)" "$OUTBOX_PROMTOOL_ROOT"
    [[ -x "$PROMTOOL" ]] || die "the package holds no $PROMTOOL"
    "$PROMTOOL" --version
}

case "${1:-}" in
    install) cmd_install ;;
    *) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
