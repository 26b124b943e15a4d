#!/usr/bin/env bash
# REINFORCE++: returns normalized over the whole batch (no critic, no per-prompt groups), with a k2 KL to the
# reference model in the reward (SkyRL: examples/train/algorithms/reinforce++/run_reinforce++.sh).
# The GSM8K script with REINFORCE++'s keys: the same CPU and GPU variables apply (see ../../gsm8k/run_gsm8k.sh).
#     bash examples/train/algorithms/reinforce++/run_reinforce++.sh              # CPU: the embedded model
#     NUM_GPUS=4 bash examples/train/algorithms/reinforce++/run_reinforce++.sh   # GPUs: GSM8K
set -euo pipefail
export RUN_NAME="${RUN_NAME:-reinforce++}"
: "${USE_KL_IN_REWARD:=true}"
: "${KL_ESTIMATOR_TYPE:=k2}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../../gsm8k/run_gsm8k.sh" \
  trainer.algorithm.advantage_estimator="reinforce++" \
  trainer.algorithm.use_kl_loss=false \
  trainer.algorithm.use_kl_in_reward=$USE_KL_IN_REWARD \
  trainer.algorithm.kl_estimator_type=$KL_ESTIMATOR_TYPE \
  "$@"
