#!/usr/bin/env bash
# GSPO: the policy ratio and its clipping are per sequence (SkyRL: examples/train/algorithms/gspo/run_gspo_gsm8k.sh).
# The GSM8K script with GSPO's keys: the same CPU and GPU variables apply (see ../../gsm8k/run_gsm8k.sh).
#     bash examples/train/algorithms/gspo/run_gspo.sh              # CPU: the embedded model, 2-digit addition
#     NUM_GPUS=4 bash examples/train/algorithms/gspo/run_gspo.sh   # GPUs: GSM8K
set -euo pipefail
export RUN_NAME="${RUN_NAME:-gspo}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../../gsm8k/run_gsm8k.sh" \
  trainer.algorithm.policy_loss_type="gspo" \
  trainer.algorithm.loss_reduction="sequence_mean" \
  "$@"
