#!/usr/bin/env bash
# Run every documented install line in a fresh venv against the real package index and check that each of our
# packages came from this checkout, never from PyPI's packages of the same names (tests/test_installs.py), then
# resolve both GPU stacks of `scripts/setup.sh --gpu` with pip's resolver (tests/test_gpu_setup.py; wheel metadata
# only). .ci/run runs it after the main suite, beside the vLLM tests. Needs .venv (bash scripts/setup.sh) for pytest.
# Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${SKYRL_VENV:-$ROOT/.venv}"
export SKYRL_RUN_INSTALL_TESTS=1
exec "$VENV/bin/python" -m pytest -p no:cacheprovider --durations=0 \
  tests/test_installs.py tests/test_gpu_setup.py -k "install_line or stack_resolves" "$@"
