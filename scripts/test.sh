#!/usr/bin/env bash
# Set up (idempotent) and run the whole CPU test suite. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
VENV="${SKYRL_VENV:-$ROOT/.venv}"
# skyrl-tx runs its database tests on PostgreSQL too: install/start Debian's postgresql when needed (CI must).
if [ -z "${SKYRL_TX_POSTGRES_URL:-}" ]; then
  if URL="$(bash scripts/postgres.sh)"; then
    export SKYRL_TX_POSTGRES_URL="$URL"
  elif [ -n "${CI:-}" ]; then
    echo "[test] PostgreSQL could not be started; CI runs the skyrl-tx Postgres tests" >&2
    exit 1
  else
    echo "[test] PostgreSQL unavailable: the skyrl-tx Postgres tests will skip" >&2
  fi
fi
exec "$VENV/bin/python" -m pytest "$@"
