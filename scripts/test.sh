#!/usr/bin/env bash
# Set up (idempotent) and run the whole CPU test suite. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ "${SKYRL_SETUP_DONE:-0}" = "1" ] || bash scripts/setup.sh  # .ci/run sets it after running setup.sh itself
VENV="${SKYRL_VENV:-$ROOT/.venv}"
# skyrl-tx runs its database tests on PostgreSQL too: install/start Debian's postgresql when needed. When that fails
# the Postgres tests skip and their skip reason (in the summary) carries what scripts/postgres.sh printed.
if [ -z "${SKYRL_TX_POSTGRES_URL:-}" ]; then
  # The URL goes through a file, not a pipe: waiting on a pipe also waits on anything that inherited it.
  URL_FILE="$(mktemp)"
  timeout 600 bash scripts/postgres.sh >"$URL_FILE" 2>/tmp/skyrl-postgres.log || true
  URL="$(tail -1 "$URL_FILE")"
  rm -f "$URL_FILE"
  if [[ "$URL" =~ ^postgresql\+psycopg://[^/]+:[0-9]+/[A-Za-z0-9_]+$ ]]; then
    export SKYRL_TX_POSTGRES_URL="$URL"
  else
    export SKYRL_TX_POSTGRES_UNAVAILABLE="scripts/postgres.sh printed '${URL:-}'; its log ends: $(tail -3 /tmp/skyrl-postgres.log | tr '\n' ' ')"
    echo "[test] PostgreSQL unavailable, the skyrl-tx Postgres tests will skip: $SKYRL_TX_POSTGRES_UNAVAILABLE" >&2
  fi
fi
exec "$VENV/bin/python" -m pytest "$@"
