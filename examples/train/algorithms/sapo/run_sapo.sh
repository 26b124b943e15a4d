#!/usr/bin/env bash
# SAPO: a smooth, temperature-controlled gate on the policy ratio instead of a hard clip, steeper for negative
# advantages (SkyRL: examples/train/algorithms/sapo/run_sapo_gsm8k.sh).
# The GSM8K script with SAPO's keys: the same CPU and GPU variables apply (see ../../gsm8k/run_gsm8k.sh).
#     bash examples/train/algorithms/sapo/run_sapo.sh              # CPU: the embedded model, 2-digit addition
#     NUM_GPUS=4 bash examples/train/algorithms/sapo/run_sapo.sh   # GPUs: GSM8K
set -euo pipefail
export RUN_NAME="${RUN_NAME:-sapo}"
: "${TAU_POS:=1.0}"
: "${TAU_NEG:=1.05}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/../../gsm8k/run_gsm8k.sh" \
  trainer.algorithm.policy_loss_type="sapo" \
  trainer.algorithm.sapo.tau_pos=$TAU_POS \
  trainer.algorithm.sapo.tau_neg=$TAU_NEG \
  trainer.algorithm.loss_reduction="sequence_mean" \
  "$@"
