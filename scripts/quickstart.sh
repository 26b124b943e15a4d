#!/usr/bin/env bash
# Set up (idempotent) and run the main job. Until the trainer lands this runs the skyrl-gym demo: it writes a
# synthetic arithmetic dataset and plays episodes through the real environments.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
VENV="${SKYRL_VENV:-$ROOT/.venv}"
exec "$VENV/bin/python" examples/quickstart/gym_demo.py "$@"
