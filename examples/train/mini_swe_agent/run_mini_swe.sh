#!/usr/bin/env bash
# SWE agents trained with GRPO through mini-swe-agent (SkyRL: examples/mini_swe_agent/run_mini_swe_8B.sh, whose
# entrypoint and keys this uses). Each trajectory is mini-swe-agent's DefaultAgent running shell commands on one task
# instance, sampling from the run's own engines token in, token out; the reward is 1 when the instance's eval script
# passes on the agent's submitted patch. The workflow: skyrl_agent.mini_swe_agent (pip install -e "./skyrl-agent[miniswe]").
#
# CPU (NUM_GPUS unset): the embedded model on generated one-bug Python repositories (skyrl-agent's mini_swe tasks) in
#   mini-swe-agent's `local` environment (local.yaml next to this script): the model's commands run UNISOLATED on this
#   machine, each trajectory in a fresh git repository under the temp folder. The model is far too small to fix a
#   bug; the run shows the whole loop (agent, shell, patch, eval script, training step) working.
#     bash examples/train/mini_swe_agent/run_mini_swe.sh
# GPUs: SWE-Gym in containers. DATA_DIR holds SkyRL's preprocess_swegym.py output (train.parquet,
#   validation.parquet); MINISWE_CONFIG is a mini-swe-agent config with `environment_class: docker` (or podman,
#   singularity), such as SkyRL's swebench.yaml.
#     NUM_GPUS=8 MINISWE_CONFIG=swebench.yaml DATA_DIR=$HOME/data/swe_gym_subset bash examples/train/mini_swe_agent/run_mini_swe.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=mini_swe}"
if [[ -z "${NUM_GPUS:-}" ]]; then
  : "${TRAIN_SIZE:=64}" "${TEST_SIZE:=8}" "${TRAIN_BATCH_SIZE:=4}" "${N_SAMPLES:=2}" "${MAX_STEPS:=2}"
  : "${MAX_PROMPT_LENGTH:=128}" "${MAX_GENERATE_LENGTH:=48}" "${MAX_INPUT_LENGTH:=500}"  # 512 positions
  : "${EVAL_BATCH_SIZE:=8}"
else
  : "${TRAIN_BATCH_SIZE:=16}" "${N_SAMPLES:=4}" "${MICRO_BATCH_SIZE:=1}" "${EVAL_BATCH_SIZE:=50}"
  : "${MAX_PROMPT_LENGTH:=4096}" "${MAX_GENERATE_LENGTH:=4096}" "${MAX_INPUT_LENGTH:=30720}"
fi
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

MINI_BATCH_SIZE=$TRAIN_BATCH_SIZE
if [[ "$ON_GPU" == true ]]; then
  : "${MODEL:=Qwen/Qwen3-8B}"
  : "${DATA_DIR:=$HOME/data/swe_gym_subset}"
  : "${MINISWE_CONFIG:=swebench.yaml}"
  VAL_FILE=validation.parquet
else
  cpu_inputs mini_swe
  : "${MINISWE_CONFIG:=$SKYRL_TRAIN_EXAMPLES/mini_swe_agent/local.yaml}"
  VAL_FILE=test.parquet
fi
: "${MINISWE_TRAJ_DIR:=$OUT_DIR/trajectories}"
SWE_DATA=(data.train_data="['$DATA_DIR/train.parquet']" data.val_data="['$DATA_DIR/$VAL_FILE']")
unset DATA_DIR  # the data keys are set above (SkyRL's SWE-Gym data names its held-out split validation)

shared_overrides colocated
# SkyRL's module path lives under this repo's examples/: importable from any working directory
export PYTHONPATH="$(cd "$SKYRL_TRAIN_EXAMPLES/../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m examples.train.mini_swe_agent.main_mini_swe \
  "${SWE_DATA[@]}" \
  trainer.algorithm.advantage_estimator="grpo" \
  generator.max_input_length="$MAX_INPUT_LENGTH" \
  trainer.project_name="mini_swe" \
  +generator.miniswe_config_path="$MINISWE_CONFIG" \
  +generator.miniswe_traj_dir="$MINISWE_TRAJ_DIR" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
