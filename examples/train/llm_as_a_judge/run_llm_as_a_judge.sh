#!/usr/bin/env bash
# GRPO rewarded by a judge model instead of a rule: a sequence-classification reward model scores each answer
# (SkyRL: examples/train/llm_as_a_judge/run_llm_judge.sh, whose judge is an LLM behind an API; here it is a reward
# model run by the trainer's own workers, see docs/rewards.md).
# The GSM8K script with the reward model's keys: the same CPU and GPU variables apply (see ../gsm8k/run_gsm8k.sh).
#
# CPU (NUM_GPUS unset): a judge fitted once (cached) on the embedded model to tell right sums from wrong ones scores
#   the training rows; held-out accuracy is still the exact rule, so it shows whether the judge taught addition.
#     bash examples/train/llm_as_a_judge/run_llm_as_a_judge.sh
# GPUs: GSM8K and a hub reward model (REWARD_MODEL); it scores every row (REWARD_COMBINE=model).
#     NUM_GPUS=4 REWARD_MODEL=/models/my-reward-model bash examples/train/llm_as_a_judge/run_llm_as_a_judge.sh
set -euo pipefail
export RUN_NAME="${RUN_NAME:-llm_as_a_judge}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"  # for ON_GPU, NUM_GPUS and OUT_DIR
if [[ "$ON_GPU" == true ]]; then
  : "${REWARD_MODEL:=Skywork/Skywork-Reward-V2-Qwen3-0.6B}"
  : "${REWARD_COMBINE:=model}"
else
  export CPU_DATA=judge      # training rows ask for the reward model, held-out rows for the exact rule
  : "${REWARD_MODEL:=$OUT_DIR/judge}"
  : "${REWARD_COMBINE:=by_row}"
fi
exec bash "$SKYRL_TRAIN_EXAMPLES/gsm8k/run_gsm8k.sh" \
  reward.model.path="$REWARD_MODEL" \
  reward.combine=$REWARD_COMBINE \
  reward.model.fsdp.mixed_precision.param_dtype=$DTYPE \
  trainer.placement.reward_num_gpus_per_node=$NUM_GPUS \
  "$@"
