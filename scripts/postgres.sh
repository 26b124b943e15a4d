#!/usr/bin/env bash
# Make a local PostgreSQL answer for the skyrl-tx tests and benchmarks: install Debian's `postgresql` when it is
# missing (root only), start its cluster when it is down, create the role (allowed to create databases: each test
# makes its own) and the database, and print the URL.
#   bash scripts/postgres.sh          # prints postgresql+psycopg://skyrl:skyrl@127.0.0.1:<port>/skyrl_tx
set -euo pipefail
log() { echo "[postgres] $*" >&2; }
DB="${SKYRL_TX_PG_DB:-skyrl_tx}"
# Only the URL goes to stdout (callers capture it): everything the tools below print goes to stderr. Commands that
# can start the server (apt's postinst, pg_ctlcluster) run through `detached`: a daemon that inherited the caller's
# stdout pipe would hold it open forever, and `URL=$(bash scripts/postgres.sh)` would never return (it hung CI once).
exec 3>&1 1>&2
DETACHED_LOG="$(mktemp)"
trap 'rm -f "$DETACHED_LOG"' EXIT
detached() {
  local status=0
  "$@" </dev/null >"$DETACHED_LOG" 2>&1 3>&- || status=$?
  cat "$DETACHED_LOG" >&2
  return "$status"
}
# The first cluster pg_lsclusters lists, as "VERSION CLUSTER PORT STATUS" (lines that are not a cluster are skipped).
first_cluster() { pg_lsclusters --no-header 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ {print $1, $2, $3, $4; exit}'; }
if ! command -v pg_lsclusters >/dev/null 2>&1; then
  if [ "$(id -u)" != "0" ]; then
    log "postgresql is not installed and this is not root: install it (apt-get install postgresql) and rerun"
    exit 1
  fi
  log "installing Debian's postgresql"
  DEBIAN_FRONTEND=noninteractive detached apt-get install -y -q postgresql || {
    detached apt-get update -q
    DEBIAN_FRONTEND=noninteractive detached apt-get install -y -q postgresql
  }
fi
read -r VERSION CLUSTER PORT STATUS _ <<<"$(first_cluster)" || true
if [ -z "${VERSION:-}" ]; then
  log "no cluster found; creating one"
  VERSION="$(ls /usr/lib/postgresql | sort -n | tail -1)"
  detached pg_createcluster "$VERSION" main
  read -r VERSION CLUSTER PORT STATUS _ <<<"$(first_cluster)" || true
fi
if [ -z "${PORT:-}" ]; then
  log "no PostgreSQL cluster could be found or created; pg_lsclusters printed:"
  pg_lsclusters >&2 || true
  exit 1
fi
if [[ "$STATUS" != online* ]]; then
  log "starting cluster $VERSION/$CLUSTER on port $PORT"
  detached pg_ctlcluster "$VERSION" "$CLUSTER" start
fi
as_postgres() { if [ "$(id -u)" = "0" ]; then su postgres -c "$1"; else sh -c "$1"; fi; }
for _ in $(seq 1 30); do
  as_postgres "psql -p $PORT -tAc 'select 1'" >/dev/null 2>&1 && break
  sleep 1
done
if [ "$(as_postgres "psql -p $PORT -tAc \"select 1 from pg_roles where rolname='skyrl'\"")" != "1" ]; then
  as_postgres "psql -p $PORT -qc \"create role skyrl login createdb password 'skyrl'\""
fi
as_postgres "psql -p $PORT -qc \"alter role skyrl createdb\"" # tests create a database each
if [ "$(as_postgres "psql -p $PORT -tAc \"select 1 from pg_database where datname='$DB'\"")" != "1" ]; then
  as_postgres "psql -p $PORT -qc \"create database $DB owner skyrl\""
fi
echo "postgresql+psycopg://skyrl:skyrl@127.0.0.1:$PORT/$DB" >&3
