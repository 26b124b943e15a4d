#!/usr/bin/env bash
# Create or reuse a virtual environment and install this repository's packages into it (editable). Idempotent; fails
# loudly. torch is pinned and installed before anything that could pull it in (an unpinned request may fetch another
# multi-GB build). Every install line names the packages by path: PyPI's `skyrl-gym`, `skyrl-train` and `skyrl-tx`
# are other projects, and the packages pin each other to a local version (`==0.1.0+repo`) that no index can serve.
#
#   bash scripts/setup.sh                 CPU: all four packages with their dev extras, torch 2.13.0 CPU (.venv)
#   bash scripts/setup.sh --core          CPU: skyrl-gym and skyrl-train alone, without extras: what training runs
#                                         need (the quickstart uses it)
#   bash scripts/setup.sh --gpu vllm      CUDA: torch 2.13.0 (PyPI's CUDA build), vLLM 0.32.0, megatron-core 0.16.1
#                                         and the four packages with their dev extras (.venv)
#   bash scripts/setup.sh --gpu sglang    CUDA: torch 2.14.1, SGLang 0.5.23, megatron-core 0.16.1 and the four
#                                         packages (.venv-sglang: SGLang and vLLM pin different torch versions)
#   ... --gpu STACK --dry-run             resolve that stack's requirements with pip's resolver in a throwaway venv
#                                         (wheel metadata only, by HTTP range requests; nothing is installed) and
#                                         print the versions it picked: a version conflict shows up here
#
# Environment: PYTHON (the interpreter to build the venv from, python3), SKYRL_VENV (the venv's folder),
# SKYRL_SKIP_TORCH=1 (CPU modes: keep the torch already in the venv), SKYRL_TORCH_INDEX_URL (--gpu: the PyTorch
# package index of your CUDA version, when PyPI's default CUDA build does not suit your driver),
# SKYRL_DRY_RUN_REPORT (--dry-run: where pip's JSON report goes), SKYRL_NO_GPU_CHECK=1 (--gpu: install without an
# NVIDIA driver, e.g. while building an image).
set -euo pipefail
MODE=cpu
STACK=""
DRY_RUN=0
usage="the options are --core, --gpu vllm|sglang and (with --gpu) --dry-run"
while [ $# -gt 0 ]; do
  case "$1" in
    --core) MODE=core ;;
    --gpu)
      MODE=gpu
      STACK="${2:-}"
      if [ "$STACK" != "vllm" ] && [ "$STACK" != "sglang" ]; then
        echo "[setup] error: --gpu needs a stack, 'vllm' or 'sglang' (got '${STACK}')" >&2
        exit 2
      fi
      shift
      ;;
    --dry-run) DRY_RUN=1 ;;
    *) echo "[setup] error: unknown option '$1' ($usage)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$DRY_RUN" = "1" ] && [ "$MODE" != "gpu" ]; then
  echo "[setup] error: --dry-run goes with --gpu vllm|sglang (the CPU installs are cheap: run them)" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"

quiet_pip_warnings() { grep -v "^WARNING: Location" || true; }  # this machine's pip.conf names absent mirrors
log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "[setup] error: Python >= 3.11 is required; '$PYTHON' is $("$PYTHON" --version 2>&1)" >&2
  exit 1
fi

if [ "$MODE" = "gpu" ]; then
  # The pins of each GPU stack; CI resolves both with --dry-run (tests/test_gpu_setup.py), so a conflict between
  # them and the packages' own requirements shows up there. flash-attn is not among them: the trainer loads models
  # with transformers' default attention (torch SDPA), and vLLM and SGLang bring their own attention kernels.
  MEGATRON="megatron-core==0.16.1"
  if [ "$STACK" = "vllm" ]; then
    TORCH_VERSION="2.13.0"
    ENGINE="vllm==0.32.0"
    TRAIN_EXTRAS="dev,megatron"
    VENV="${SKYRL_VENV:-$ROOT/.venv}"
  else
    TORCH_VERSION="2.14.1"
    ENGINE="sglang==0.5.23"
    TRAIN_EXTRAS="dev,megatron,sglang"
    VENV="${SKYRL_VENV:-$ROOT/.venv-sglang}"
  fi
  # skyrl-gym without its openenv extra: openenv-core pulls gradio, whose pins need not agree with the engines'.
  REQUIREMENTS=(
    "torch==$TORCH_VERSION" "$ENGINE" "$MEGATRON"
    -e "./skyrl-gym[search,mcp]" -e "./skyrl-train[$TRAIN_EXTRAS]" -e "./skyrl-agent[dev]" -e "./skyrl-tx[dev]"
  )
  TORCH_INDEX=()
  if [ -n "${SKYRL_TORCH_INDEX_URL:-}" ]; then
    TORCH_INDEX=(--index-url "$SKYRL_TORCH_INDEX_URL")
  fi
  if [ "$DRY_RUN" = "1" ]; then
    SCRATCH="$(mktemp -d)"
    trap 'rm -rf "$SCRATCH"' EXIT
    REPORT="${SKYRL_DRY_RUN_REPORT:-$SCRATCH/report.json}"
    log "resolving the $STACK stack in a throwaway venv (metadata only, nothing is installed)"
    "$PYTHON" -m venv "$SCRATCH/venv"
    PIP=("$SCRATCH/venv/bin/python" -m pip --disable-pip-version-check)
    "${PIP[@]}" install -q --upgrade pip 2> >(quiet_pip_warnings >&2)
    # fast-deps reads each wheel's metadata with HTTP range requests instead of downloading the wheel (an index that
    # serves metadata files, PEP 658, is used directly); a sdist is still downloaded to build its metadata.
    DRY=(install --dry-run --use-feature=fast-deps --progress-bar off)
    if [ ${#TORCH_INDEX[@]} -gt 0 ]; then
      "${PIP[@]}" "${DRY[@]}" "${TORCH_INDEX[@]}" "torch==$TORCH_VERSION" 2> >(quiet_pip_warnings >&2)
    fi
    "${PIP[@]}" "${DRY[@]}" --report "$REPORT" "${REQUIREMENTS[@]}" 2> >(quiet_pip_warnings >&2)
    "$SCRATCH/venv/bin/python" - "$REPORT" "$ROOT" <<'EOF'
import json, sys
report, root = json.load(open(sys.argv[1])), sys.argv[2]
picked = {item["metadata"]["name"].lower(): item for item in report["install"]}
for name in ("torch", "vllm", "sglang", "megatron-core", "transformers", "ray", "flashinfer-python"):
    if name in picked:
        print(f"[setup] would install {name} {picked[name]['metadata']['version']}")
for name in ("skyrl-gym", "skyrl-train", "skyrl-agent", "skyrl-tx"):
    url = picked[name]["download_info"]["url"]
    print(f"[setup] would install {name} {picked[name]['metadata']['version']} from {url.removeprefix('file://' + root + '/')}")
EOF
    log "the $STACK stack resolves"
    exit 0
  fi
  if [ "${SKYRL_NO_GPU_CHECK:-0}" != "1" ] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "[setup] error: --gpu installs CUDA builds (several GB) but this machine has no NVIDIA driver (nvidia-smi" \
      "not found). Check the stack with '--gpu $STACK --dry-run'; to install anyway (e.g. building an image)," \
      "set SKYRL_NO_GPU_CHECK=1." >&2
    exit 1
  fi
else
  VENV="${SKYRL_VENV:-$ROOT/.venv}"
  TORCH_VERSION="${SKYRL_TORCH_VERSION:-2.13.0}"
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment at $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip 2> >(quiet_pip_warnings >&2)

if [ "$MODE" = "gpu" ]; then
  if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
    log "installing torch==$TORCH_VERSION (a CUDA build: a few GB the first time)"
    "${PIP[@]}" install -q "${TORCH_INDEX[@]}" "torch==$TORCH_VERSION" 2> >(quiet_pip_warnings >&2)
  fi
  log "installing $ENGINE, $MEGATRON, skyrl-gym, skyrl-train, skyrl-agent, skyrl-tx (editable, dev extras)"
  "${PIP[@]}" install -q "${REQUIREMENTS[@]}" 2> >(quiet_pip_warnings >&2)
  "$VENV/bin/python" -c "
import torch, skyrl_gym, skyrl_train, skyrl_agent, skyrl_tx, megatron.core, ${STACK}
print('[setup] torch', torch.__version__, 'CUDA', torch.version.cuda, '| ${STACK}', ${STACK}.__version__)
print('[setup] GPUs visible:', torch.cuda.device_count())
"
  log "check the GPU paths with: bash scripts/gpu_smoke.sh (docs/gpu.md)"
  exit 0
fi

if [ "${SKYRL_SKIP_TORCH:-0}" != "1" ]; then
  if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
    log "installing torch==$TORCH_VERSION"
    "${PIP[@]}" install -q "torch==$TORCH_VERSION" numpy 2> >(quiet_pip_warnings >&2)
  fi
  "$VENV/bin/python" -c "import torch; print('[setup] torch', torch.__version__)"
fi

if [ "$MODE" = "core" ]; then
  log "installing skyrl-gym, skyrl-train (editable, no extras)"
  "${PIP[@]}" install -q -e ./skyrl-gym -e ./skyrl-train 2> >(quiet_pip_warnings >&2)
  "$VENV/bin/python" -c "import skyrl_gym, skyrl_train; print('[setup] packages import')"
  exit 0
fi
log "installing skyrl-gym, skyrl-train, skyrl-agent, skyrl-tx (editable, dev extras)"
"${PIP[@]}" install -q \
  -e "./skyrl-gym[dev]" \
  -e "./skyrl-train[dev]" \
  -e "./skyrl-agent[dev]" \
  -e "./skyrl-tx[dev]" 2> >(quiet_pip_warnings >&2)
# megatron-core (2.5 MB) for the CPU tests of the Megatron strategy (weights load into its real GPTModel over gloo).
# --no-deps: its requirements (torch, numpy, packaging) are installed above, and pip must not touch torch.
"${PIP[@]}" install -q --no-deps "megatron-core==0.16.1" 2> >(quiet_pip_warnings >&2)
"$VENV/bin/python" -c "import skyrl_gym, skyrl_train, skyrl_agent, skyrl_tx; print('[setup] packages import')"
