#!/usr/bin/env bash
# Dr. GRPO: GRPO without its two length and difficulty biases: advantages are not divided by the group's standard
# deviation, and token losses are summed per sequence and divided by a constant, the longest possible sequence
# (SkyRL: examples/train/algorithms/drgrpo/run_drgrpo_gsm8k.sh).
# The GSM8K script with Dr. GRPO's keys: the same CPU and GPU variables apply (see ../../gsm8k/run_gsm8k.sh).
#     bash examples/train/algorithms/drgrpo/run_drgrpo.sh              # CPU: the embedded model, 2-digit addition
#     NUM_GPUS=4 bash examples/train/algorithms/drgrpo/run_drgrpo.sh   # GPUs: GSM8K
set -euo pipefail
export RUN_NAME="${RUN_NAME:-drgrpo}"
source "$(dirname "${BASH_SOURCE[0]}")/../../common.sh"  # for MAX_PROMPT_LENGTH and MAX_GENERATE_LENGTH
exec bash "$SKYRL_TRAIN_EXAMPLES/gsm8k/run_gsm8k.sh" \
  trainer.algorithm.loss_reduction="seq_mean_token_sum_norm" \
  trainer.algorithm.grpo_norm_by_std=false \
  trainer.algorithm.max_seq_len=$((MAX_PROMPT_LENGTH + MAX_GENERATE_LENGTH)) \
  trainer.algorithm.use_kl_loss=false \
  "$@"
