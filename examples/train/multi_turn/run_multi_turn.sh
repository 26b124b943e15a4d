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
else
  cpu_inputs multi_turn
  : "${MAX_TURNS:=2}"
  : "${MAX_INPUT_LENGTH:=384}"    # the prompt, two answers and one feedback message, in characters
  : "${ANSWER_MODE:=flexible}"    # the last number of the reply
fi

shared_overrides colocated
multi_turn_overrides
exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  trainer.algorithm.advantage_estimator="grpo" \
  environment.env_class=gsm8k_multi_turn \
  environment.skyrl_gym.gsm8k_multi_turn.mode=$ANSWER_MODE \
  trainer.project_name="gsm8k_multi_turn" \
  "${MULTI_TURN_OVERRIDES[@]}" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
