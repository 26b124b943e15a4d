#!/usr/bin/env bash
# PPO with a critic: GAE advantages from a value model trained beside the policy, a KL loss to the reference model,
# policy, critic, reference and engines colocated (SkyRL: examples/train/ppo/run_ppo.sh).
#
# CPU (NUM_GPUS unset): the embedded tiny model (and a critic on a copy of its backbone) on 2-digit addition.
#     bash examples/train/ppo/run_ppo.sh
# GPUs: GSM8K (python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k) and a hub model.
#     NUM_GPUS=4 bash examples/train/ppo/run_ppo.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=ppo}"
if [[ -z "${NUM_GPUS:-}" ]]; then
  # every sample gets a non-zero GAE advantage (GRPO zeroes groups whose rewards agree), so the policy moves further
  # per step than under GRPO: the rate that suits the quickstart's GRPO lowers accuracy here (examples/ppo/run_ppo.py)
  : "${LR:=5.0e-5}"
  : "${CRITIC_LR:=1.0e-3}"  # the value head starts from scratch
fi
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/gsm8k}"
  : "${MODEL:=Qwen/Qwen2.5-1.5B-Instruct}"
  : "${CRITIC_LR:=5.0e-6}"
  : "${ENV_CLASS:=gsm8k}"
else
  cpu_inputs addition
  : "${ENV_CLASS:=addition}"
fi
: "${CRITIC_MODEL:=$MODEL}"  # a value head on a copy of this model's backbone

exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/test.parquet']" \
  trainer.algorithm.advantage_estimator="gae" \
  trainer.algorithm.gamma=1.0 \
  trainer.algorithm.lambd=1.0 \
  trainer.algorithm.value_clip=0.2 \
  trainer.policy.model.path="$MODEL" \
  trainer.critic.model.path="$CRITIC_MODEL" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp2 \
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \
  trainer.placement.ref_num_gpus_per_node=$NUM_GPUS \
  trainer.placement.critic_num_gpus_per_node=$NUM_GPUS \
  generator.inference_engine.num_engines=$NUM_GPUS \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.model_dtype=$DTYPE \
  trainer.policy.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.ref.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.critic.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.gradient_checkpointing=$GRADIENT_CHECKPOINTING \
  trainer.epochs=$EPOCHS \
  trainer.max_training_steps=$MAX_STEPS \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=$TRAIN_BATCH_SIZE \
  trainer.policy_mini_batch_size=$MINI_BATCH_SIZE \
  trainer.critic_mini_batch_size=$MINI_BATCH_SIZE \
  trainer.micro_forward_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.micro_train_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.ckpt_interval=$CKPT_INTERVAL \
  trainer.max_prompt_length=$MAX_PROMPT_LENGTH \
  generator.sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  generator.sampling_params.temperature=$TEMPERATURE \
  trainer.policy.optimizer_config.lr=$LR \
  trainer.critic.optimizer_config.lr=$CRITIC_LR \
  trainer.algorithm.use_kl_loss=true \
  trainer.algorithm.kl_loss_coef=0.01 \
  generator.inference_engine.backend=$INFERENCE_BACKEND \
  generator.inference_engine.weight_sync_backend=auto \
  generator.batched=true \
  environment.env_class=$ENV_CLASS \
  generator.n_samples_per_prompt=$N_SAMPLES \
  generator.inference_engine.gpu_memory_utilization=0.8 \
  trainer.logger="$LOGGER" \
  trainer.project_name="gsm8k" \
  trainer.run_name="$RUN_NAME" \
  trainer.resume_mode=$RESUME_MODE \
  trainer.ckpt_path="$CKPT_DIR" \
  trainer.export_path="$EXPORT_DIR" \
  trainer.log_path="$LOG_DIR" \
  trainer.eval_batch_size=1024 \
  trainer.eval_before_train=true \
  trainer.eval_interval=$EVAL_INTERVAL \
  "$@"
