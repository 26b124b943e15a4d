#!/usr/bin/env bash
# Format and lint the repo: ruff (with --fix) then black, line length 120. `--check` changes nothing and fails on
# any finding (this is what CI runs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
BIN="${SKYRL_VENV:-$ROOT/.venv}/bin"
RUFF="$BIN/ruff"; BLACK="$BIN/black"
[ -x "$RUFF" ] || RUFF="$(command -v ruff || true)"
[ -x "$BLACK" ] || BLACK="$(command -v black || true)"
if [ -z "$RUFF" ] || [ -z "$BLACK" ]; then
  echo "format.sh: ruff and black are needed; run 'bash scripts/setup.sh' first (they are in the dev extras)" >&2
  exit 1
fi
if [ "${1:-}" = "--check" ]; then
  "$RUFF" check .
  "$BLACK" --check --quiet .
  echo "format.sh: clean"
else
  "$RUFF" check --fix .
  "$BLACK" --quiet .
fi
