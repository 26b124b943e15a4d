#!/usr/bin/env bash
# GRPO with LoRA adapters on the Megatron workers: the adapters live on megatron-core's tensor-parallel layers, only
# they train and are synced to the engines, and the reference is the base model with them off (SkyRL:
# examples/train/megatron/run_megatron_lora_qwen3-0.6b.sh). See docs/gpu.md, Megatron.
# The LoRA script with Megatron's keys: the same CPU and GPU variables apply (see ../lora/run_lora.sh).
#
# GPUs (NUM_GPUS set; pip install 'skyrl-train[megatron]'):
#     NUM_GPUS=4 TP_SIZE=2 bash examples/train/megatron/run_megatron_lora.sh
# CPU (NUM_GPUS unset): megatron-core's forward needs CUDA, so this trains the same LoRA run with FSDP2 workers.
set -euo pipefail
export RUN_NAME="${RUN_NAME:-megatron_lora}"
: "${TP_SIZE:=1}"
MEGATRON=()
if [[ -n "${NUM_GPUS:-}" ]]; then
  MEGATRON=(
    trainer.strategy=megatron
    trainer.policy.megatron.tensor_model_parallel_size=$TP_SIZE
  )
else
  echo "run_megatron_lora.sh: no NUM_GPUS: megatron-core needs CUDA, so this CPU run uses FSDP2 workers" >&2
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/../lora/run_lora.sh" "${MEGATRON[@]}" "$@"
