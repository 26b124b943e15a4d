#!/usr/bin/env bash
# GRPO generating through inference servers started outside the run: one remote engine per URL, the trainer on its
# own devices, new weights loaded into the servers after each step (SkyRL:
# examples/train/remote_inference_engine/run_remote.sh). See docs/inference-engines.md, Remote servers.
#
# CPU (NUM_GPUS unset): this script starts the project's server on the embedded model
#   (python -m skyrl_train.entrypoints.serve --enable-weight-updates) on a free port, with a fresh weight-update
#   token, and stops it at the end; training takes one worker process.
#     bash examples/train/remote_inference_server/run_remote.sh
# GPUs: servers you started (vLLM, SGLang or ours; the table in the docs says how) at REMOTE_URLS, comma-separated;
#   NUM_GPUS is the trainer's. Their weight-update token in SKYRL_WEIGHT_UPDATE_TOKEN, if they need one.
#     NUM_GPUS=4 REMOTE_URLS=http://10.0.0.2:8000,http://10.0.0.3:8000 bash examples/train/remote_inference_server/run_remote.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=remote}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/gsm8k}"
  : "${MODEL:=Qwen/Qwen2.5-1.5B-Instruct}"
  : "${ENV_CLASS:=gsm8k}"
  : "${USE_KL_LOSS:=true}"
  : "${REMOTE_URLS:=http://127.0.0.1:8001}"
  : "${NUM_POLICY_GPUS:=$NUM_GPUS}"
else
  cpu_inputs addition
  : "${ENV_CLASS:=addition}"
  : "${USE_KL_LOSS:=false}"
  : "${REMOTE_URLS:=http://127.0.0.1:0}"  # port 0: the server picks a free port when the run starts
  : "${NUM_POLICY_GPUS:=1}"
  if [[ "$DRY_RUN" == false ]]; then
    : "${SKYRL_WEIGHT_UPDATE_TOKEN:=$("$PYTHON" -c 'import secrets; print(secrets.token_hex(16))')}"
    export SKYRL_WEIGHT_UPDATE_TOKEN
    background_server "$OUT_DIR/server.log" "$PYTHON" -m skyrl_train.entrypoints.serve --model "$MODEL" --port 0 \
      --enable-weight-updates generator.inference_engine.model_dtype=$DTYPE
    REMOTE_URLS="$SERVER_URL"
  fi
fi
IFS=, read -ra URLS <<<"$REMOTE_URLS"
URL_LIST="$(printf "'%s'," "${URLS[@]}")"

"$PYTHON" -m skyrl_train.entrypoints.main_base \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/test.parquet']" \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=false \
  trainer.strategy=fsdp2 \
  trainer.placement.policy_num_gpus_per_node=$NUM_POLICY_GPUS \
  trainer.placement.ref_num_gpus_per_node=$NUM_POLICY_GPUS \
  generator.inference_engine.backend=remote \
  generator.inference_engine.remote_urls="[${URL_LIST%,}]" \
  generator.inference_engine.num_engines=${#URLS[@]} \
  generator.inference_engine.weight_sync_backend=auto \
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
  generator.batched=true \
  environment.env_class=$ENV_CLASS \
  generator.n_samples_per_prompt=$N_SAMPLES \
  trainer.logger="$LOGGER" \
  trainer.project_name="gsm8k-remote" \
  trainer.run_name="$RUN_NAME" \
  trainer.resume_mode=$RESUME_MODE \
  trainer.ckpt_path="$CKPT_DIR" \
  trainer.export_path="$EXPORT_DIR" \
  trainer.log_path="$LOG_DIR" \
  "$@"
