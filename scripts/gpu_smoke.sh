#!/usr/bin/env bash
# One command for GPU users: check every path this CPU-only project cannot run in its own CI.
# For each path below it runs the path's marked tests, then a 5-step quickstart with the path's overrides, and
# prints a pass/fail table at the end. docs/gpu.md says what each path covers and what was verified on CPU only.
#
#   bash scripts/gpu_smoke.sh              # every path
#   bash scripts/gpu_smoke.sh broadcast vllm    # only the named paths
#   SKYRL_VENV=/path/to/venv bash scripts/gpu_smoke.sh
#
# The vLLM and SGLang paths expect those packages (CUDA builds) in the venv; the script does not install them.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${SKYRL_VENV:-$ROOT/.venv}/bin/python"
LOG_DIR="${SKYRL_GPU_SMOKE_LOGS:-$ROOT/gpu_smoke_logs}"
mkdir -p "$LOG_DIR"

# name | pytest arguments (paths and a marker expression) | quickstart overrides ("-" = no quickstart for this path)
# Every quickstart also gets trainer.device=cuda (the quickstart's own config is the CPU one).
PATHS=(
  "broadcast|skyrl-train/tests/weight_sync -m gpu|trainer.placement.colocate_all=false generator.inference_engine.weight_sync_backend=broadcast"
  "cuda_ipc|skyrl-train/tests/weight_sync/test_cuda_ipc.py -m gpu|trainer.placement.colocate_all=true generator.inference_engine.weight_sync_backend=cuda_ipc"
  "fsdp2_gpu|skyrl-train/tests/workers -m gpu|-"
  "packing_flash|skyrl-train/tests/models/test_varlen_attention.py skyrl-train/tests/models/test_packing.py -m gpu|trainer.policy.fsdp.mixed_precision.param_dtype=bfloat16 trainer.remove_microbatch_padding=true"
  "vllm|skyrl-train/tests/inference/test_vllm_engine.py skyrl-train/tests/trainer/test_trainer_vllm.py -m vllm|generator.inference_engine.backend=vllm"
  "lora_vllm|skyrl-train/tests/inference/test_vllm_lora.py -m vllm|generator.inference_engine.backend=vllm trainer.policy.model.lora.rank=8 trainer.policy.optimizer.lr=2e-3"
  "megatron|skyrl-train/tests/workers/strategy/test_megatron.py skyrl-train/tests/workers/strategy/test_megatron_gpu.py -m megatron|trainer.strategy=megatron"
  "sglang|skyrl-train/tests/inference/test_sglang_engine.py -m sglang|generator.inference_engine.backend=sglang generator.inference_engine.model_dtype=bfloat16 trainer.placement.policy_num_gpus_per_node=1 generator.inference_engine.num_engines=1"
)

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_smoke: torch in $PY sees no CUDA GPU; this script only makes sense on a GPU machine." >&2
  exit 2
fi

declare -a RESULTS=()
FAILED=0
for entry in "${PATHS[@]}"; do
  IFS="|" read -r name pytest_args overrides <<<"$entry"
  if [[ $# -gt 0 ]] && [[ ! " $* " =~ " $name " ]]; then
    continue
  fi
  echo "=== $name: tests ($pytest_args)"
  # shellcheck disable=SC2086  # the pytest arguments are a word list on purpose
  if "$PY" -m pytest $pytest_args -p no:cacheprovider -q >"$LOG_DIR/$name.tests.log" 2>&1; then
    tests="pass"
  else
    tests="FAIL"
    FAILED=1
  fi
  quickstart="-"
  if [[ "$overrides" != "-" ]]; then
    echo "=== $name: 5-step quickstart ($overrides)"
    # shellcheck disable=SC2086
    if "$PY" examples/quickstart/run_quickstart.py --out "$LOG_DIR/$name.quickstart" \
      trainer.max_training_steps=5 trainer.device=cuda $overrides >"$LOG_DIR/$name.quickstart.log" 2>&1; then
      quickstart="pass"
    else
      quickstart="FAIL"
      FAILED=1
    fi
  fi
  RESULTS+=("$name|$tests|$quickstart")
done

printf "\n%-12s %-6s %-10s\n" "path" "tests" "quickstart"
for row in "${RESULTS[@]}"; do
  IFS="|" read -r name tests quickstart <<<"$row"
  printf "%-12s %-6s %-10s\n" "$name" "$tests" "$quickstart"
done
echo "logs: $LOG_DIR"
exit "$FAILED"
