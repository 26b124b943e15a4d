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
# Two test processes (pytest-xdist) by default: one pytest process keeps about one of two cores busy, and most tests
# are single-threaded. `worksteal` hands each worker a contiguous half of the tests (module fixtures stay warm) and
# lets an idle worker take tests from the other's queue. SKYRL_TEST_WORKERS=N sets the count (0: one process, no
# xdist); a `-n`/`--numprocesses` or `-p no:xdist` of your own wins.
PARALLEL=()
case " $* " in
  *" -n "* | *" -n"[0-9]* | *" --numprocesses"* | *"no:xdist"*) ;;
  *)
    CORES="$(nproc 2>/dev/null || echo 1)"
    WORKERS="${SKYRL_TEST_WORKERS:-$([ "$CORES" -ge 2 ] && echo 2 || echo 0)}"
    if ! [[ "$WORKERS" =~ ^[0-9]+$ ]]; then
      echo "[test] error: SKYRL_TEST_WORKERS must be a whole number of test processes (0: no xdist), got '$WORKERS'" >&2
      exit 2
    fi
    [ "$WORKERS" -gt 0 ] && PARALLEL=(-n "$WORKERS" --dist worksteal)
    ;;
esac
exec "$VENV/bin/python" -m pytest "${PARALLEL[@]}" "$@"
