#!/usr/bin/env bash
# Set up (idempotent) and run the whole CPU test suite. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
VENV="${SKYRL_VENV:-$ROOT/.venv}"
exec "$VENV/bin/python" -m pytest "$@"
