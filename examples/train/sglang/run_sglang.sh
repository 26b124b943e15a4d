#!/usr/bin/env bash
# GRPO with SGLang engines generating, weights synced into them after each step (SkyRL:
# examples/train/sglang/run_sglang_gsm8k.sh). See docs/inference-engines.md.
# The GSM8K script with SGLang as the backend: the same CPU and GPU variables apply (see ../gsm8k/run_gsm8k.sh).
#
# GPUs (NUM_GPUS set; SGLang installed, see docs/gpu-setup.md):
#     NUM_GPUS=4 bash examples/train/sglang/run_sglang.sh
# CPU (NUM_GPUS unset): SGLang needs CUDA, so this trains the same run with the hf engine and says so.
set -euo pipefail
export RUN_NAME="${RUN_NAME:-sglang}"
if [[ -n "${NUM_GPUS:-}" ]]; then
  export INFERENCE_BACKEND="${INFERENCE_BACKEND:-sglang}"
else
  echo "run_sglang.sh: no NUM_GPUS: SGLang needs CUDA, so this CPU run generates with the hf engine" >&2
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/../gsm8k/run_gsm8k.sh" "$@"
