#!/usr/bin/env bash
# PPO with a critic: GAE advantages from a value model trained beside the policy, a KL loss to the reference model,
# policy, critic, reference and engines colocated (SkyRL: examples/train/ppo/run_ppo.sh).
#
# CPU (NUM_GPUS unset): the embedded tiny model (and a critic on a copy of its backbone) on 2-digit addition.
#     bash examples/train/ppo/run_ppo.sh
# GPUs: GSM8K (python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k) and a hub model.
#     NUM_GPUS=4 bash examples/train/ppo/run_ppo.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=ppo}"
if [[ -z "${NUM_GPUS:-}" ]]; then
  # every sample gets a non-zero GAE advantage (GRPO zeroes groups whose rewards agree), so the policy moves further
  # per step than under GRPO: the rate that suits the quickstart's GRPO lowers accuracy here (examples/ppo/run_ppo.py)
  : "${LR:=5.0e-5}"
  : "${CRITIC_LR:=1.0e-3}"  # the value head starts from scratch
fi
: "${USE_KL_LOSS:=true}"  # a KL loss to the reference model, on CPU too (kl_loss_coef below)
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

gsm8k_inputs
: "${CRITIC_LR:=5.0e-6}"     # on GPUs (the CPU rate is set above)
: "${CRITIC_MODEL:=$MODEL}"  # a value head on a copy of this model's backbone

shared_overrides colocated
exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  trainer.algorithm.advantage_estimator="gae" \
  trainer.algorithm.gamma=1.0 \
  trainer.algorithm.lambd=1.0 \
  trainer.algorithm.value_clip=0.2 \
  trainer.critic.model.path="$CRITIC_MODEL" \
  trainer.placement.critic_num_gpus_per_node=$NUM_GPUS \
  trainer.critic.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.critic_mini_batch_size=$MINI_BATCH_SIZE \
  trainer.critic.optimizer_config.lr=$CRITIC_LR \
  trainer.algorithm.kl_loss_coef=0.01 \
  generator.batched=true \
  environment.env_class=$ENV_CLASS \
  trainer.project_name="gsm8k" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
