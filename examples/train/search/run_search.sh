#!/usr/bin/env bash
# Multi-turn search agent (Search-R1): the model queries a retrieval server with <search>...</search>, reads the
# passages it gets back, and answers with <answer>...</answer>, scored by exact match (SkyRL:
# examples/train/search/run_search.sh).
#
# CPU (NUM_GPUS unset): "a+b=" questions over a corpus with one passage per sum; this script starts the project's
#   BM25 retrieval server (python -m skyrl_gym.tools.retrieval_server) on a free port and stops it at the end. The
#   embedded model was never taught the <search>/<answer> format, so rewards stay near 0: this run checks the
#   plumbing (HTTP tool calls, observations, multi-turn masks), not learning.
#     bash examples/train/search/run_search.sh
# GPUs: Search-R1 rows (env_class search) in DATA_DIR, a retrieval server you started at SEARCH_URL (ours above over
#   your corpus, or any server answering POST /retrieve) and a hub model.
#     NUM_GPUS=8 SEARCH_URL=http://127.0.0.1:8000 bash examples/train/search/run_search.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=search}"
: "${EVAL_BATCH_SIZE:=256}"
: "${GPU_MEMORY_UTILIZATION:=0.5}"
if [[ -n "${NUM_GPUS:-}" ]]; then  # before common.sh, whose GPU defaults (512 / 1024) would win otherwise
  : "${MAX_PROMPT_LENGTH:=2048}"
  : "${MAX_GENERATE_LENGTH:=500}"
fi
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

: "${TIS_IMP_RATIO_CAP:=2.0}"
if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/searchR1}"
  : "${MODEL:=Qwen/Qwen2.5-3B-Instruct}"
  : "${SEARCH_URL:=http://127.0.0.1:8000}"
  : "${MAX_TURNS:=4}"
  : "${MAX_INPUT_LENGTH:=4096}"
else
  cpu_inputs search
  : "${SEARCH_URL:=http://127.0.0.1:0}"  # port 0: the server picks a free port when the run starts
  : "${MAX_TURNS:=2}"
  : "${MAX_INPUT_LENGTH:=512}"
  if [[ "$DRY_RUN" == false ]]; then
    background_server "$OUT_DIR/retriever.log" \
      "$PYTHON" -m skyrl_gym.tools.retrieval_server --corpus "$OUT_DIR/corpus.jsonl" --port 0
    SEARCH_URL="$SERVER_URL"
  fi
fi

shared_overrides colocated
multi_turn_overrides
"$PYTHON" -m skyrl_train.entrypoints.main_base \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.policy.optimizer_config.max_grad_norm=0.5 \
  trainer.algorithm.kl_loss_coef=0.001 \
  trainer.algorithm.off_policy_correction.tis_ratio_type=token \
  trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high=$TIS_IMP_RATIO_CAP \
  generator.sampling_params.top_p=1.0 \
  generator.sampling_params.stop='["</search>", "</answer>"]' \
  generator.append_eos_token_after_stop_str_in_multi_turn=true \
  environment.env_class="search" \
  environment.skyrl_gym.max_env_workers=16 \
  environment.skyrl_gym.search.log_requests=false \
  environment.skyrl_gym.search.search_url="$SEARCH_URL" \
  environment.skyrl_gym.search.topk=3 \
  trainer.project_name="skyrl-search" \
  generator.eval_sampling_params.temperature=0 \
  generator.eval_sampling_params.stop='["</search>", "</answer>"]' \
  generator.eval_sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  "${MULTI_TURN_OVERRIDES[@]}" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
