#!/usr/bin/env bash
# DAPO: asymmetric clipping (clip-higher), dynamic sampling that drops prompts whose samples all score the same, a
# token-mean loss, overlong filtering and a soft penalty for answers that run into the length limit
# (SkyRL: examples/train/algorithms/dapo/run_dapo_gsm8k.sh).
#
# CPU (NUM_GPUS unset): the embedded tiny model on 2-digit addition; the length limit is 8 tokens, so the soft
#   penalty starts 4 tokens before it (a right answer takes at most 4: three digits and the end-of-turn token).
#     bash examples/train/algorithms/dapo/run_dapo.sh
# GPUs: GSM8K (python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k) and a hub model.
#     NUM_GPUS=4 bash examples/train/algorithms/dapo/run_dapo.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../../common.sh.
# SkyRL's recipe reduces the loss with `token_mean_legacy`, which this project does not have: `token_mean` here.
set -euo pipefail
: "${RUN_NAME:=dapo}"
: "${USE_KL_LOSS:=false}"  # no KL term, on GPUs too
source "$(dirname "${BASH_SOURCE[0]}")/../../common.sh"

# DAPO's main parameters
: "${EPS_CLIP_LOW:=0.2}"
: "${EPS_CLIP_HIGH:=0.28}"
: "${DYNAMIC_SAMPLING_TYPE:=filter}"
: "${DYNAMIC_SAMPLING_MAX_SAMPLE_BATCHES:=30}"
: "${LOSS_REDUCTION:=token_mean}"
: "${APPLY_OVERLONG_FILTERING:=true}"  # truncated answers are left out of the loss
: "${OVERLONG_BUFFER_PENALTY_FACTOR:=1.0}"
# other DAPO parameters
: "${TOP_P:=1.0}"
: "${EVAL_TOP_P:=0.7}"
: "${CLIP_RATIO_C:=10.0}"
gsm8k_inputs
if [[ "$ON_GPU" == true ]]; then
  : "${OVERLONG_BUFFER_LEN:=512}"
else
  : "${OVERLONG_BUFFER_LEN:=4}"
fi

shared_overrides colocated
exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.algorithm.policy_loss_type="dual_clip" \
  trainer.algorithm.overlong_buffer_len=$OVERLONG_BUFFER_LEN \
  trainer.algorithm.overlong_buffer_penalty_factor=$OVERLONG_BUFFER_PENALTY_FACTOR \
  trainer.algorithm.eps_clip_low=$EPS_CLIP_LOW \
  trainer.algorithm.eps_clip_high=$EPS_CLIP_HIGH \
  trainer.algorithm.dynamic_sampling.type=$DYNAMIC_SAMPLING_TYPE \
  trainer.algorithm.dynamic_sampling.max_sample_batches=$DYNAMIC_SAMPLING_MAX_SAMPLE_BATCHES \
  trainer.algorithm.loss_reduction=$LOSS_REDUCTION \
  generator.apply_overlong_filtering=$APPLY_OVERLONG_FILTERING \
  generator.sampling_params.top_p=$TOP_P \
  generator.eval_sampling_params.top_p=$EVAL_TOP_P \
  generator.eval_sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  trainer.algorithm.clip_ratio_c=$CLIP_RATIO_C \
  trainer.policy.optimizer_config.weight_decay=0.1 \
  trainer.policy.optimizer_config.max_grad_norm=1.0 \
  generator.batched=true \
  environment.env_class=$ENV_CLASS \
  trainer.project_name="gsm8k" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
