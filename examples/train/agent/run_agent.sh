#!/usr/bin/env bash
# A skyrl-agent agent trained with GRPO: each trajectory is the agent acting through the run's own engines (tool
# calls, tool results as messages, a final answer), trained token-in/token-out (SkyRL: skyrl-agent's
# examples/run_skyrl/*.sh). The agent and its task come from AGENT_CONFIG (see docs/skyrl-agent.md); the entrypoint
# writes the task's dataset under OUT_DIR/data and adds the workflow keys.
#
# CPU (NUM_GPUS unset): the embedded agent model (a tiny model warm-started on tool-call traces) on tool-use
#   arithmetic with a calculator tool; held-out task success is printed before and after.
#     bash examples/train/agent/run_agent.sh
# GPUs: a hub model, the same agent config or yours.
#     NUM_GPUS=4 AGENT_CONFIG=my_agent.yaml bash examples/train/agent/run_agent.sh
# Arguments are config overrides, applied last; --dry-run prints the resolved config. Shared defaults: ../common.sh.
set -euo pipefail
: "${RUN_NAME:=agent}"
if [[ -z "${NUM_GPUS:-}" ]]; then
  : "${LR:=5.0e-4}" "${TRAIN_BATCH_SIZE:=16}" "${MAX_GENERATE_LENGTH:=96}"  # per model turn
fi
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

: "${AGENT_CONFIG:=$SKYRL_TRAIN_EXAMPLES/../agent/tool_arithmetic.yaml}"
MINI_BATCH_SIZE=$TRAIN_BATCH_SIZE  # one optimizer step per batch of tasks
if [[ "$ON_GPU" == true ]]; then
  : "${MODEL:=Qwen/Qwen2.5-1.5B-Instruct}"
  : "${OUT_DIR:=$HOME/skyrl-agent/$RUN_NAME}"
else
  cpu_inputs agent
fi
unset DATA_DIR  # not read here: the entrypoint writes the task's data under OUT_DIR

shared_overrides colocated
exec "$PYTHON" -m skyrl_agent.entrypoint --agent-config "$AGENT_CONFIG" --out "$OUT_DIR" \
  trainer.algorithm.advantage_estimator="grpo" \
  generator.eval_sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  trainer.project_name="skyrl-agent" \
  "${SHARED_OVERRIDES[@]}" \
  "$@"
