#!/usr/bin/env bash
# Multi-turn text-to-SQL (SkyRL-SQL): the model explores a SQLite database with <sql>...</sql> queries, sees each
# result table, and answers with <solution>...</solution>, rewarded 1 when its rows match the gold SQL's
# (SkyRL: examples/train/text_to_sql/run_skyrl_sql.sh).
#
# CPU (NUM_GPUS unset): "what is a+b?" questions over a local table `sums(a, b, total)` built here. The embedded
#   model was never taught the <sql>/<solution> format, so rewards stay near 0: this run checks the plumbing (real
#   SQLite queries, observations, multi-turn masks), not learning.
#     bash examples/train/text2sql/run_text2sql.sh
# GPUs: SkyRL-SQL rows (env_class text2sql, a db_id per row) in DATA_DIR, their databases in DB_DIR, a hub model.
#     NUM_GPUS=8 DATA_DIR=$HOME/data/sql DB_DIR=$HOME/data/sql/db_files bash examples/train/text2sql/run_text2sql.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=text2sql}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/sql}"
  : "${DB_DIR:=$DATA_DIR/db_files}"
  : "${MODEL:=Qwen/Qwen2.5-Coder-7B-Instruct}"
  : "${MAX_TURNS:=6}"
  : "${MAX_PROMPT_LENGTH:=6000}"
  : "${MAX_INPUT_LENGTH:=29000}"
  : "${MAX_GENERATE_LENGTH:=3000}"
  : "${USE_KL_LOSS:=false}"
else
  cpu_inputs text2sql
  : "${DB_DIR:=$OUT_DIR/db}"
  : "${MAX_TURNS:=2}"
  : "${MAX_INPUT_LENGTH:=512}"
  : "${USE_KL_LOSS:=false}"
fi

exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/test.parquet']" \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.algorithm.use_kl_loss=$USE_KL_LOSS \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp2 \
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \
  trainer.placement.ref_num_gpus_per_node=$NUM_GPUS \
  generator.inference_engine.num_engines=$NUM_GPUS \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.backend=$INFERENCE_BACKEND \
  generator.inference_engine.weight_sync_backend=auto \
  generator.inference_engine.gpu_memory_utilization=0.7 \
  generator.inference_engine.model_dtype=$DTYPE \
  trainer.policy.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.ref.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.gradient_checkpointing=$GRADIENT_CHECKPOINTING \
  trainer.epochs=$EPOCHS \
  trainer.max_training_steps=$MAX_STEPS \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=$TRAIN_BATCH_SIZE \
  trainer.policy_mini_batch_size=$MINI_BATCH_SIZE \
  trainer.micro_forward_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.micro_train_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.max_prompt_length=$MAX_PROMPT_LENGTH \
  generator.max_input_length=$MAX_INPUT_LENGTH \
  generator.sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  generator.sampling_params.temperature=$TEMPERATURE \
  generator.sampling_params.stop='["</sql>", "</solution>"]' \
  generator.eval_sampling_params.stop='["</sql>", "</solution>"]' \
  generator.eval_sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  generator.append_eos_token_after_stop_str_in_multi_turn=true \
  trainer.policy.optimizer_config.lr=$LR \
  generator.batched=false \
  generator.max_turns=$MAX_TURNS \
  generator.n_samples_per_prompt=$N_SAMPLES \
  environment.env_class=text2sql \
  environment.skyrl_gym.text2sql.db_path="$DB_DIR" \
  trainer.logger="$LOGGER" \
  trainer.project_name="skyrl-sql" \
  trainer.run_name="$RUN_NAME" \
  trainer.ckpt_interval=$CKPT_INTERVAL \
  trainer.resume_mode=$RESUME_MODE \
  trainer.ckpt_path="$CKPT_DIR" \
  trainer.export_path="$EXPORT_DIR" \
  trainer.log_path="$LOG_DIR" \
  trainer.eval_batch_size=1024 \
  trainer.eval_before_train=true \
  trainer.eval_interval=$EVAL_INTERVAL \
  "$@"
