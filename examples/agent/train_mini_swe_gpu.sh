#!/usr/bin/env bash
# GRPO for a CodeAct agent on mini-SWE with a 7B coder model: 8 GPUs on one node, FSDP2 policy, 8 vLLM engines
# (one per GPU: the vllm engine has no tensor parallelism) colocated with it. Needs CUDA and vLLM's CUDA build (not
# this project's CPU CI). Extra key=value arguments override the config; --dry-run prints the resolved config without
# starting anything.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL="${MODEL:-Qwen/Qwen2.5-Coder-7B-Instruct}"
python -m skyrl_agent.entrypoint --agent-config "$HERE/mini_swe_gpu.yaml" --out "${OUT:-outputs/mini_swe}" \
  --train-size 4096 --test-size 128 \
  trainer.device=cuda \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=true \
  trainer.placement.policy_num_gpus_per_node=8 \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.num_engines=8 \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.model_dtype=bfloat16 \
  generator.inference_engine.gpu_memory_utilization=0.6 \
  trainer.policy.gradient_checkpointing=true \
  trainer.policy.optimizer.lr=1e-6 \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.algorithm.use_kl_loss=false \
  trainer.train_batch_size=64 \
  trainer.policy_mini_batch_size=16 \
  trainer.micro_train_batch_size_per_gpu=2 \
  trainer.micro_forward_batch_size_per_gpu=4 \
  generator.n_samples_per_prompt=8 \
  generator.sampling_params.max_generate_length=1024 \
  generator.sampling_params.temperature=0.7 \
  data.max_prompt_length=512 \
  trainer.max_training_steps=200 \
  trainer.eval_interval=20 \
  trainer.ckpt_interval=20 \
  "$@"
