#!/usr/bin/env bash
# CISPO: the importance-sampling weight is clipped and kept out of the gradient, so every token still gets one
# (SkyRL: examples/train/algorithms/cispo/run_cispo_gsm8k.sh).
# The GSM8K script with CISPO's keys: the same CPU and GPU variables apply (see ../../gsm8k/run_gsm8k.sh).
#     bash examples/train/algorithms/cispo/run_cispo.sh              # CPU: the embedded model, 2-digit addition
#     NUM_GPUS=4 bash examples/train/algorithms/cispo/run_cispo.sh   # GPUs: GSM8K
set -euo pipefail
export RUN_NAME="${RUN_NAME:-cispo}"
: "${CISPO_EPS_CLIP_LOW:=1}"   # the weight is clipped to [1 - low, 1 + high]
: "${CISPO_EPS_CLIP_HIGH:=4}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../../gsm8k/run_gsm8k.sh" \
  trainer.algorithm.policy_loss_type="cispo" \
  trainer.algorithm.cispo.cispo_eps_clip_low=$CISPO_EPS_CLIP_LOW \
  trainer.algorithm.cispo.cispo_eps_clip_high=$CISPO_EPS_CLIP_HIGH \
  trainer.algorithm.use_kl_loss=false \
  "$@"
