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

gsm8k_inputs
if [[ "$ON_GPU" == true ]]; then
  : "${REMOTE_URLS:=http://127.0.0.1:8001}"
  : "${NUM_POLICY_GPUS:=$NUM_GPUS}"
else
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
INFERENCE_BACKEND=remote  # one remote engine per URL
IFS=, read -ra URLS <<<"$REMOTE_URLS"
URL_LIST="$(printf "'%s'," "${URLS[@]}")"

shared_overrides separate "$NUM_POLICY_GPUS" "${#URLS[@]}"
"$PYTHON" -m skyrl_train.entrypoints.main_base \
  trainer.algorithm.advantage_estimator="grpo" \
  generator.inference_engine.remote_urls="[${URL_LIST%,}]" \
  generator.batched=true \
  environment.env_class=$ENV_CLASS \
  trainer.project_name="gsm8k-remote" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
