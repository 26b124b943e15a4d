#!/usr/bin/env bash
# GRPO, training and generation colocated (SkyRL: examples/train/gsm8k/run_gsm8k.sh).
#
# CPU (NUM_GPUS unset): the embedded tiny model learns 2-digit addition, the CPU twin of GSM8K, for MAX_STEPS steps;
#   held-out accuracy is printed before and after.
#     bash examples/train/gsm8k/run_gsm8k.sh
# GPUs: GSM8K (python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k) and a hub model.
#     NUM_GPUS=4 bash examples/train/gsm8k/run_gsm8k.sh
#     NUM_GPUS=8 DATA_DIR=/data/gsm8k MODEL=Qwen/Qwen2.5-7B-Instruct LOGGER=console bash examples/train/gsm8k/run_gsm8k.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
# The algorithm scripts under ../algorithms run this one with their own keys appended (as SkyRL's GSPO and SAPO do).
: "${RUN_NAME:=gsm8k}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

gsm8k_inputs "${CPU_DATA:-addition}"  # on CPU, the kind of local_inputs.py (../llm_as_a_judge sets `judge`)

shared_overrides colocated
exec "$PYTHON" -m skyrl_train.entrypoints.main_base \
  trainer.algorithm.advantage_estimator="grpo" \
  generator.batched=true \
  environment.env_class=$ENV_CLASS \
  trainer.project_name="gsm8k" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
