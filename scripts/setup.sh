#!/usr/bin/env bash
# Create or reuse .venv and install every package in editable mode with its dev extras. Idempotent; fails loudly.
# torch is pinned to 2.13.0 and installed before anything that could pull it in (any other request may fetch a
# multi-GB CUDA build). GPU users: install the torch build you want first, then run this with SKYRL_SKIP_TORCH=1.
#   bash scripts/setup.sh          all four packages with their dev extras (tests, trackers, cluster tools, linters)
#   bash scripts/setup.sh --core   skyrl-gym and skyrl-train alone, without extras: what training runs need (the
#                                  quickstart uses it; it took 51 s where the rest of the full install took 106 s)
set -euo pipefail
CORE=0
for arg in "$@"; do
  case "$arg" in
    --core) CORE=1 ;;
    *) echo "[setup] error: unknown option '$arg' (the only option is --core)" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="${SKYRL_VENV:-$ROOT/.venv}"
TORCH_VERSION="${SKYRL_TORCH_VERSION:-2.13.0}"

quiet_pip_warnings() { grep -v "^WARNING: Location" || true; }  # this machine's pip.conf names absent mirrors
log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "[setup] error: Python >= 3.11 is required; '$PYTHON' is $("$PYTHON" --version 2>&1)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment at $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip 2> >(quiet_pip_warnings >&2)

if [ "${SKYRL_SKIP_TORCH:-0}" != "1" ]; then
  if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
    log "installing torch==$TORCH_VERSION"
    "${PIP[@]}" install -q "torch==$TORCH_VERSION" numpy 2> >(quiet_pip_warnings >&2)
  fi
  "$VENV/bin/python" -c "import torch; print('[setup] torch', torch.__version__)"
fi

if [ "$CORE" = "1" ]; then
  log "installing skyrl-gym, skyrl-train (editable, no extras)"
  "${PIP[@]}" install -q -e skyrl-gym -e skyrl-train 2> >(quiet_pip_warnings >&2)
  "$VENV/bin/python" -c "import skyrl_gym, skyrl_train; print('[setup] packages import')"
  exit 0
fi
log "installing skyrl-gym, skyrl-train, skyrl-agent, skyrl-tx (editable, dev extras)"
"${PIP[@]}" install -q \
  -e "skyrl-gym[dev]" \
  -e "skyrl-train[dev]" \
  -e "skyrl-agent[dev]" \
  -e "skyrl-tx[dev]" 2> >(quiet_pip_warnings >&2)
# megatron-core (2.5 MB) for the CPU tests of the Megatron strategy (weights load into its real GPTModel over gloo).
# --no-deps: its requirements (torch, numpy, packaging) are installed above, and pip must not touch torch.
"${PIP[@]}" install -q --no-deps "megatron-core==0.16.1" 2> >(quiet_pip_warnings >&2)
"$VENV/bin/python" -c "import skyrl_gym, skyrl_train, skyrl_agent, skyrl_tx; print('[setup] packages import')"
