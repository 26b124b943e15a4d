#!/usr/bin/env bash
# Set up .venv-vllm (idempotent) and run every test marked `vllm` with the real vLLM on CPU. Extra arguments go to
# pytest. The main suite (scripts/test.sh) skips these tests: its venv has no vLLM.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_vllm.sh
VENV="${SKYRL_VLLM_VENV:-$ROOT/.venv-vllm}"
exec "$VENV/bin/python" -m pytest -m vllm skyrl-train/tests skyrl-tx/tests "$@"
