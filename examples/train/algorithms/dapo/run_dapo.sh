#!/usr/bin/env bash
# DAPO: asymmetric clipping (clip-higher), dynamic sampling that drops prompts whose samples all score the same, a
# token-mean loss, overlong filtering and a soft penalty for answers that run into the length limit
# (SkyRL: examples/train/algorithms/dapo/run_dapo_gsm8k.sh).
#
# CPU (NUM_GPUS unset): the embedded tiny model on 2-digit addition; the length limit is 8 tokens, so the soft
#   penalty starts 4 tokens before it (a right answer takes at most 4: three digits and the end-of-turn token).
#     bash examples/train/algorithms/dapo/run_dapo.sh
# GPUs: GSM8K (python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k) and a hub model.
#     NUM_GPUS=4 bash examples/train/algorithms/dapo/run_dapo.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../../common.sh.
# SkyRL's recipe reduces the loss with `token_mean_legacy`, which this project does not have: `token_mean` here.
set -euo pipefail
: "${RUN_NAME:=dapo}"
source "$(dirname "${BASH_SOURCE[0]}")/../../common.sh"

# DAPO's main parameters
: "${EPS_CLIP_LOW:=0.2}"
: "${EPS_CLIP_HIGH:=0.28}"
: "${DYNAMIC_SAMPLING_TYPE:=filter}"
: "${DYNAMIC_SAMPLING_MAX_SAMPLE_BATCHES:=30}"
: "${LOSS_REDUCTION:=token_mean}"
: "${APPLY_OVERLONG_FILTERING:=true}"  # truncated answers are left out of the loss
: "${OVERLONG_BUFFER_PENALTY_FACTOR:=1.0}"
# other DAPO parameters
: "${USE_KL_LOSS:=false}"
: "${TOP_P:=1.0}"
: "${EVAL_TOP_P:=0.7}"
: "${CLIP_RATIO_C:=10.0}"
if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/gsm8k}"
  : "${MODEL:=Qwen/Qwen2.5-1.5B-Instruct}"
  : "${ENV_CLASS:=gsm8k}"
  : "${OVERLONG_BUFFER_LEN:=512}"
else
  cpu_inputs addition
  : "${ENV_CLASS:=addition}"
  : "${OVERLONG_BUFFER_LEN:=4}"
fi

exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/test.parquet']" \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.algorithm.policy_loss_type="dual_clip" \
  trainer.algorithm.overlong_buffer_len=$OVERLONG_BUFFER_LEN \
  trainer.algorithm.overlong_buffer_penalty_factor=$OVERLONG_BUFFER_PENALTY_FACTOR \
  trainer.algorithm.eps_clip_low=$EPS_CLIP_LOW \
  trainer.algorithm.eps_clip_high=$EPS_CLIP_HIGH \
  trainer.algorithm.dynamic_sampling.type=$DYNAMIC_SAMPLING_TYPE \
  trainer.algorithm.dynamic_sampling.max_sample_batches=$DYNAMIC_SAMPLING_MAX_SAMPLE_BATCHES \
  trainer.algorithm.loss_reduction=$LOSS_REDUCTION \
  generator.apply_overlong_filtering=$APPLY_OVERLONG_FILTERING \
  generator.sampling_params.temperature=$TEMPERATURE \
  generator.sampling_params.top_p=$TOP_P \
  generator.eval_sampling_params.top_p=$EVAL_TOP_P \
  generator.eval_sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  trainer.algorithm.use_kl_loss=$USE_KL_LOSS \
  trainer.algorithm.clip_ratio_c=$CLIP_RATIO_C \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp2 \
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \
  trainer.placement.ref_num_gpus_per_node=$NUM_GPUS \
  generator.inference_engine.num_engines=$NUM_GPUS \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.model_dtype=$DTYPE \
  trainer.policy.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.ref.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.gradient_checkpointing=$GRADIENT_CHECKPOINTING \
  trainer.epochs=$EPOCHS \
  trainer.max_training_steps=$MAX_STEPS \
  trainer.eval_batch_size=1024 \
  trainer.eval_before_train=true \
  trainer.eval_interval=$EVAL_INTERVAL \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=$TRAIN_BATCH_SIZE \
  trainer.policy_mini_batch_size=$MINI_BATCH_SIZE \
  trainer.micro_forward_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.micro_train_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.ckpt_interval=$CKPT_INTERVAL \
  trainer.max_prompt_length=$MAX_PROMPT_LENGTH \
  generator.sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  trainer.policy.optimizer_config.lr=$LR \
  trainer.policy.optimizer_config.weight_decay=0.1 \
  trainer.policy.optimizer_config.max_grad_norm=1.0 \
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
  "$@"
