#!/usr/bin/env bash
# GRPO with LoRA adapters on the policy: only the adapters train and are synced to the engines, and the reference
# model is the base model with the adapters off (SkyRL: examples/train/lora/run_qwen2_5_0.5b_gsm8k_grpo_lora.sh).
# The GSM8K script with LoRA's keys: the same CPU and GPU variables apply (see ../gsm8k/run_gsm8k.sh).
#     bash examples/train/lora/run_lora.sh              # CPU: rank-8 adapters on the embedded model
#     NUM_GPUS=4 bash examples/train/lora/run_lora.sh   # GPUs: rank-32 adapters on Qwen2.5-0.5B-Instruct, GSM8K
set -euo pipefail
export RUN_NAME="${RUN_NAME:-lora}"
if [[ -n "${NUM_GPUS:-}" ]]; then
  export MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
  : "${LORA_RANK:=32}" "${LORA_ALPHA:=32}"
  export LR="${LR:-3.0e-5}"
else
  : "${LORA_RANK:=8}" "${LORA_ALPHA:=16}"
  export LR="${LR:-2.0e-3}"  # adapters learn slower per step: ten times the full model's rate (docs/lora.md)
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/../gsm8k/run_gsm8k.sh" \
  trainer.policy.model.lora.rank=$LORA_RANK \
  trainer.policy.model.lora.alpha=$LORA_ALPHA \
  "$@"
