#!/usr/bin/env bash
# GRPO on a mixture-of-experts model with Megatron workers: tensor parallelism (sequence parallel) for the attention,
# and the experts spread whole over the ranks, the tensor-parallel ones included (megatron-core's MoE parallel
# folding; SkyRL: examples/train/megatron/run_megatron_qwen3-30b-a3b.sh). See docs/gpu.md, Megatron.
# The GSM8K script with Megatron's keys: the same CPU and GPU variables apply (see ../gsm8k/run_gsm8k.sh).
#
# GPUs (NUM_GPUS set; pip install 'skyrl-train[megatron]'; MODEL a Qwen2-MoE, Qwen3-MoE or Mixtral checkpoint):
# EP_SIZE * ETP_SIZE must divide NUM_GPUS.
#     NUM_GPUS=8 TP_SIZE=4 EP_SIZE=8 ETP_SIZE=1 MODEL=Qwen/Qwen3-30B-A3B bash examples/train/megatron/run_megatron_moe.sh
# CPU (NUM_GPUS unset): megatron-core's forward needs CUDA, so this trains the embedded (dense) model with FSDP2.
set -euo pipefail
export RUN_NAME="${RUN_NAME:-megatron_moe}"
: "${TP_SIZE:=2}" "${EP_SIZE:=4}" "${ETP_SIZE:=1}"
MEGATRON=()
if [[ -n "${NUM_GPUS:-}" ]]; then
  export MODEL="${MODEL:-Qwen/Qwen3-30B-A3B}"
  MEGATRON=(
    trainer.strategy=megatron
    trainer.policy.megatron.tensor_model_parallel_size=$TP_SIZE
    trainer.policy.megatron.expert_model_parallel_size=$EP_SIZE
    trainer.policy.megatron.expert_tensor_parallel_size=$ETP_SIZE
    trainer.ref.megatron.tensor_model_parallel_size=$TP_SIZE
    trainer.ref.megatron.expert_model_parallel_size=$EP_SIZE
    trainer.ref.megatron.expert_tensor_parallel_size=$ETP_SIZE
  )
else
  echo "run_megatron_moe.sh: no NUM_GPUS: megatron-core needs CUDA, so this CPU run uses FSDP2 workers" >&2
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/../gsm8k/run_gsm8k.sh" "${MEGATRON[@]}" "$@"
