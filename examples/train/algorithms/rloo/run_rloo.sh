#!/usr/bin/env bash
# RLOO: each sample's baseline is the mean reward of the other samples of its prompt; the KL to the reference model
# is subtracted from the reward instead of added to the loss (SkyRL: examples/train/algorithms/rloo/run_rloo.sh).
# The GSM8K script with RLOO's keys: the same CPU and GPU variables apply (see ../../gsm8k/run_gsm8k.sh).
#     bash examples/train/algorithms/rloo/run_rloo.sh              # CPU: the embedded model, 2-digit addition
#     NUM_GPUS=4 bash examples/train/algorithms/rloo/run_rloo.sh   # GPUs: GSM8K
set -euo pipefail
export RUN_NAME="${RUN_NAME:-rloo}"
: "${USE_KL_IN_REWARD:=true}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../../gsm8k/run_gsm8k.sh" \
  trainer.algorithm.advantage_estimator="rloo" \
  trainer.algorithm.use_kl_loss=false \
  trainer.algorithm.use_kl_in_reward=$USE_KL_IN_REWARD \
  "$@"
