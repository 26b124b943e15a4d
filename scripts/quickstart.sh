#!/usr/bin/env bash
# Set up (idempotent) and run the main job: GRPO on the embedded tiny model through Ray, FSDP2, an inference engine
# and weight sync (examples/quickstart/run_quickstart.py). Extra arguments go to that script: `--out DIR` or config
# overrides such as `trainer.max_training_steps=50`. `gym_demo.py` next to it shows the environments alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh --core  # skyrl-gym and skyrl-train only: the quickstart needs no dev extras
VENV="${SKYRL_VENV:-$ROOT/.venv}"
exec "$VENV/bin/python" examples/quickstart/run_quickstart.py "$@"
