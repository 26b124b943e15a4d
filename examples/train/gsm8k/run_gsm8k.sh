#!/usr/bin/env bash
# GRPO, training and generation colocated (SkyRL: examples/train/gsm8k/run_gsm8k.sh).
#
# CPU (NUM_GPUS unset): the embedded tiny model learns 2-digit addition, the CPU twin of GSM8K, for MAX_STEPS steps;
#   held-out accuracy is printed before and after.
#     bash examples/train/gsm8k/run_gsm8k.sh
# GPUs: GSM8K (python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k) and a hub model.
#     NUM_GPUS=4 bash examples/train/gsm8k/run_gsm8k.sh
#     NUM_GPUS=8 DATA_DIR=/data/gsm8k MODEL=Qwen/Qwen2.5-7B-Instruct LOGGER=console bash examples/train/gsm8k/run_gsm8k.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
# The algorithm scripts under ../algorithms run this one with their own keys appended (as SkyRL's GSPO and SAPO do).
: "${RUN_NAME:=gsm8k}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/gsm8k}"
  : "${MODEL:=Qwen/Qwen2.5-1.5B-Instruct}"
  : "${ENV_CLASS:=gsm8k}"
  : "${USE_KL_LOSS:=true}"
else
  cpu_inputs "${CPU_DATA:-addition}"  # the kind of local_inputs.py (../llm_as_a_judge sets `judge`)
  : "${ENV_CLASS:=addition}"
  : "${USE_KL_LOSS:=false}"  # no reference model: on CPU every role is two more processes on two cores
fi

exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/test.parquet']" \
  trainer.algorithm.advantage_estimator="grpo" \
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
  generator.sampling_params.temperature=$TEMPERATURE \
  trainer.policy.optimizer_config.lr=$LR \
  trainer.algorithm.use_kl_loss=$USE_KL_LOSS \
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
