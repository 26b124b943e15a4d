#!/usr/bin/env bash
# GRPO on GSM8K with Qwen/Qwen2.5-1.5B-Instruct: one node, 4 (or 8) GPUs, everything colocated.
#
# Prepare the data first (writes $DATA_DIR/train.parquet and $DATA_DIR/test.parquet):
#   python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir "$HOME/data/gsm8k"
# then run, optionally overriding the variables below and adding config overrides at the end:
#   bash examples/gsm8k/run_gsm8k.sh
#   NUM_GPUS=8 LOGGER=console bash examples/gsm8k/run_gsm8k.sh trainer.epochs=5
#   bash examples/gsm8k/run_gsm8k.sh --dry-run        # print the resolved config and exit (no GPU needed)
#
# Every key is documented in docs/reference/configuration.md; extra arguments are passed to the entrypoint
# unchanged and come last, so they win over the values below.
set -euo pipefail

DATA_DIR="${DATA_DIR:-$HOME/data/gsm8k}"        # output of gsm8k_dataset.py
NUM_GPUS="${NUM_GPUS:-4}"                       # GPUs on the node: 4 or 8 (policy, ref and engines share them)
LOGGER="${LOGGER:-wandb}"                       # wandb needs `wandb login` (or WANDB_MODE=offline); or `console`
MODEL="${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}"    # Hugging Face id or local directory
CKPT_DIR="${CKPT_DIR:-$HOME/ckpts/gsm8k_1.5B}"  # checkpoints; the run resumes from the newest one found here
EXPORT_DIR="${EXPORT_DIR:-$HOME/exports/gsm8k_1.5B}"
RUN_NAME="${RUN_NAME:-gsm8k_grpo_qwen2.5_1.5b}"
PYTHON="${PYTHON:-python}"                      # the interpreter of the environment skyrl-train is installed in
# `hf` is the project's own batched decoder and needs nothing extra; INFERENCE_BACKEND=vllm uses vLLM (installed
# separately, see docs/inference-engines.md) and generates much faster on GPUs.
INFERENCE_BACKEND="${INFERENCE_BACKEND:-hf}"

exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  data.train_data="['${DATA_DIR}/train.parquet']" \
  data.val_data="['${DATA_DIR}/test.parquet']" \
  data.max_prompt_length=512 \
  environment.env_class=gsm8k \
  trainer.device=cuda \
  trainer.strategy=fsdp2 \
  trainer.policy.model.path="${MODEL}" \
  trainer.placement.colocate_all=true \
  trainer.placement.policy_num_nodes=1 \
  trainer.placement.policy_num_gpus_per_node="${NUM_GPUS}" \
  trainer.placement.ref_num_nodes=1 \
  trainer.placement.ref_num_gpus_per_node="${NUM_GPUS}" \
  generator.inference_engine.backend="${INFERENCE_BACKEND}" \
  generator.inference_engine.num_engines="${NUM_GPUS}" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.model_dtype=bfloat16 \
  generator.inference_engine.gpu_memory_utilization=0.8 \
  generator.inference_engine.weight_sync_backend=auto \
  trainer.policy.fsdp.mixed_precision.param_dtype=bfloat16 \
  trainer.ref.fsdp.mixed_precision.param_dtype=bfloat16 \
  trainer.policy.gradient_checkpointing=true \
  trainer.policy.optimizer.lr=1.0e-6 \
  trainer.policy.optimizer.weight_decay=0.01 \
  trainer.policy.optimizer.scheduler=constant_with_warmup \
  trainer.algorithm.advantage_estimator=grpo \
  trainer.algorithm.use_kl_loss=true \
  trainer.algorithm.kl_loss_coef=0.001 \
  trainer.algorithm.kl_estimator_type=k3 \
  trainer.epochs=20 \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=1024 \
  trainer.policy_mini_batch_size=256 \
  trainer.micro_forward_batch_size_per_gpu=16 \
  trainer.micro_train_batch_size_per_gpu=16 \
  generator.n_samples_per_prompt=5 \
  generator.batched=true \
  generator.sampling_params.max_generate_length=1024 \
  generator.sampling_params.temperature=1.0 \
  generator.eval_sampling_params.max_generate_length=1024 \
  generator.eval_sampling_params.temperature=0.0 \
  trainer.eval_before_train=true \
  trainer.eval_interval=5 \
  trainer.eval_batch_size=1024 \
  trainer.ckpt_interval=10 \
  trainer.max_ckpts_to_keep=3 \
  trainer.resume_mode=latest \
  trainer.ckpt_path="${CKPT_DIR}" \
  trainer.export_path="${EXPORT_DIR}" \
  trainer.logger="${LOGGER}" \
  trainer.project_name=gsm8k \
  trainer.run_name="${RUN_NAME}" \
  "$@"
