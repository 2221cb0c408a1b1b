#!/usr/bin/env bash
# Prepares the machine's pre-started PostgreSQL for the tests: logical decoding
# (wal_level=logical, for the CDC relay) and replication connections from loopback.
# Idempotent; restarts the cluster only when wal_level has to change.
set -euo pipefail
cluster_version=$(ls /etc/postgresql | sort -V | tail -n 1)
conf_dir=/etc/postgresql/$cluster_version/main
psql_() { psql -h 127.0.0.1 -U postgres -d postgres -Atq "$@"; }

wait_ready() {
  for _ in $(seq 1 60); do
    psql_ -c 'select 1' >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "PostgreSQL did not accept connections on 127.0.0.1:5432" >&2
  return 1
}

if ! psql_ -c 'select 1' >/dev/null 2>&1; then
  pg_ctlcluster --skip-systemctl-redirect "$cluster_version" main start
fi
wait_ready

if ! grep -Eq '^host\s+replication\s+all\s+127\.0\.0\.1/32\s+trust' "$conf_dir/pg_hba.conf"; then
  echo 'host replication all 127.0.0.1/32 trust' >> "$conf_dir/pg_hba.conf"
  psql_ -c 'select pg_reload_conf()' >/dev/null
fi

if [ "$(psql_ -c 'show wal_level')" != "logical" ]; then
  psql_ -c 'ALTER SYSTEM SET wal_level = logical' >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$cluster_version" main restart
  wait_ready
fi
echo "postgres: wal_level=$(psql_ -c 'show wal_level'), replication from 127.0.0.1 allowed"
