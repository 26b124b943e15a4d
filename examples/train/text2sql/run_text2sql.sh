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
: "${USE_KL_LOSS:=false}"  # no KL term, on GPUs too
: "${GPU_MEMORY_UTILIZATION:=0.7}"
if [[ -n "${NUM_GPUS:-}" ]]; then  # before common.sh, whose GPU defaults (512 / 1024) would win otherwise
  : "${MAX_PROMPT_LENGTH:=6000}"
  : "${MAX_GENERATE_LENGTH:=3000}"
fi
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [[ "$ON_GPU" == true ]]; then
  : "${DATA_DIR:=$HOME/data/sql}"
  : "${DB_DIR:=$DATA_DIR/db_files}"
  : "${MODEL:=Qwen/Qwen2.5-Coder-7B-Instruct}"
  : "${MAX_TURNS:=6}"
  : "${MAX_INPUT_LENGTH:=29000}"
else
  cpu_inputs text2sql
  : "${DB_DIR:=$OUT_DIR/db}"
  : "${MAX_TURNS:=2}"
  : "${MAX_INPUT_LENGTH:=512}"
fi

shared_overrides colocated
multi_turn_overrides
exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  trainer.algorithm.advantage_estimator="grpo" \
  generator.sampling_params.stop='["</sql>", "</solution>"]' \
  generator.eval_sampling_params.stop='["</sql>", "</solution>"]' \
  generator.eval_sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  generator.append_eos_token_after_stop_str_in_multi_turn=true \
  environment.env_class=text2sql \
  environment.skyrl_gym.text2sql.db_path="$DB_DIR" \
  trainer.project_name="skyrl-sql" \
  "${MULTI_TURN_OVERRIDES[@]}" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
