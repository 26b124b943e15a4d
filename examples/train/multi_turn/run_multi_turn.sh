#!/usr/bin/env bash
# Multi-turn GRPO with turn-level rewards: after a wrong answer the `gsm8k_multi_turn` env says what was wrong and
# the model tries again, up to MAX_TURNS answers; each turn is rewarded, and only the model's own tokens are trained
# (SkyRL: examples/train/turn_level_rewards/run_gsm8k_multi_turn.sh).
#
# CPU (NUM_GPUS unset): the embedded tiny model answers 2-digit sums (the env reads the last number of a reply). It
#   was warm-started on single questions, so it learns its first answers; what it writes after feedback is noise.
#     bash examples/train/multi_turn/run_multi_turn.sh
# GPUs: GSM8K rows for this env and a hub model:
#     python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k_multi_turn \
#       --env-class gsm8k_multi_turn
#     NUM_GPUS=1 DATA_DIR=$HOME/data/gsm8k_multi_turn bash examples/train/multi_turn/run_multi_turn.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=multi_turn}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/gsm8k_multi_turn}"
  : "${MODEL:=Qwen/Qwen2.5-0.5B-Instruct}"
  : "${MAX_TURNS:=5}"
  : "${MAX_INPUT_LENGTH:=4096}"   # the whole conversation
  : "${ANSWER_MODE:=strict}"      # the number after `#### `
  : "${USE_KL_LOSS:=true}"
else
  cpu_inputs multi_turn
  : "${MAX_TURNS:=2}"
  : "${MAX_INPUT_LENGTH:=384}"    # the prompt, two answers and one feedback message, in characters
  : "${ANSWER_MODE:=flexible}"    # the last number of the reply
  : "${USE_KL_LOSS:=false}"
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
  generator.max_input_length=$MAX_INPUT_LENGTH \
  generator.sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  generator.sampling_params.temperature=$TEMPERATURE \
  trainer.policy.optimizer_config.lr=$LR \
  trainer.algorithm.use_kl_loss=$USE_KL_LOSS \
  generator.inference_engine.backend=$INFERENCE_BACKEND \
  generator.inference_engine.weight_sync_backend=auto \
  generator.batched=false \
  generator.max_turns=$MAX_TURNS \
  environment.env_class=gsm8k_multi_turn \
  environment.skyrl_gym.gsm8k_multi_turn.mode=$ANSWER_MODE \
  generator.n_samples_per_prompt=$N_SAMPLES \
  generator.inference_engine.gpu_memory_utilization=0.8 \
  trainer.logger="$LOGGER" \
  trainer.project_name="gsm8k_multi_turn" \
  trainer.run_name="$RUN_NAME" \
  trainer.resume_mode=$RESUME_MODE \
  trainer.ckpt_path="$CKPT_DIR" \
  trainer.export_path="$EXPORT_DIR" \
  trainer.log_path="$LOG_DIR" \
  "$@"
