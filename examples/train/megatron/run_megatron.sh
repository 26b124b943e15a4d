#!/usr/bin/env bash
# GRPO with Megatron-core workers: tensor parallelism and the distributed optimizer for the policy and the reference
# model (SkyRL: examples/train/megatron/run_megatron.sh). See docs/gpu.md, Megatron.
# The GSM8K script with Megatron's keys: the same CPU and GPU variables apply (see ../gsm8k/run_gsm8k.sh).
#
# GPUs (NUM_GPUS set; pip install 'skyrl-train[megatron]'): TP_SIZE ranks per tensor-parallel group, the rest
#   data-parallel.
#     NUM_GPUS=4 TP_SIZE=2 bash examples/train/megatron/run_megatron.sh
# CPU (NUM_GPUS unset): megatron-core's forward needs CUDA, so this trains the same run with FSDP2 workers and says so.
set -euo pipefail
export RUN_NAME="${RUN_NAME:-megatron}"
: "${TP_SIZE:=1}"
MEGATRON=()
if [[ -n "${NUM_GPUS:-}" ]]; then
  MEGATRON=(
    trainer.strategy=megatron
    trainer.policy.megatron.tensor_model_parallel_size=$TP_SIZE
    trainer.ref.megatron.tensor_model_parallel_size=$TP_SIZE
  )
else
  echo "run_megatron.sh: no NUM_GPUS: megatron-core needs CUDA, so this CPU run uses FSDP2 workers" >&2
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/../gsm8k/run_gsm8k.sh" "${MEGATRON[@]}" "$@"
