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
if [[ "$ON_GPU" == true ]]; then
  : "${MODEL:=Qwen/Qwen2.5-1.5B-Instruct}"
  : "${OUT_DIR:=$HOME/skyrl-agent/$RUN_NAME}"
  : "${USE_KL_LOSS:=true}"
else
  cpu_inputs agent
  : "${USE_KL_LOSS:=false}"
fi

exec "$PYTHON" -m skyrl_agent.entrypoint --agent-config "$AGENT_CONFIG" --out "$OUT_DIR" \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp2 \
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \
  trainer.placement.ref_num_gpus_per_node=$NUM_GPUS \
  generator.inference_engine.num_engines=$NUM_GPUS \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.backend=$INFERENCE_BACKEND \
  generator.inference_engine.weight_sync_backend=auto \
  generator.inference_engine.model_dtype=$DTYPE \
  trainer.policy.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.ref.fsdp_config.mixed_precision.param_dtype=$DTYPE \
  trainer.gradient_checkpointing=$GRADIENT_CHECKPOINTING \
  trainer.epochs=$EPOCHS \
  trainer.max_training_steps=$MAX_STEPS \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=$TRAIN_BATCH_SIZE \
  trainer.policy_mini_batch_size=$TRAIN_BATCH_SIZE \
  trainer.micro_forward_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.micro_train_batch_size_per_gpu=$MICRO_BATCH_SIZE \
  trainer.max_prompt_length=$MAX_PROMPT_LENGTH \
  generator.sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  generator.eval_sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \
  generator.sampling_params.temperature=$TEMPERATURE \
  trainer.policy.optimizer_config.lr=$LR \
  trainer.algorithm.use_kl_loss=$USE_KL_LOSS \
  generator.n_samples_per_prompt=$N_SAMPLES \
  trainer.logger="$LOGGER" \
  trainer.project_name="skyrl-agent" \
  trainer.run_name="$RUN_NAME" \
  trainer.ckpt_interval=$CKPT_INTERVAL \
  trainer.resume_mode=$RESUME_MODE \
  trainer.ckpt_path="$CKPT_DIR" \
  trainer.export_path="$EXPORT_DIR" \
  trainer.log_path="$LOG_DIR" \
  trainer.eval_batch_size=1024 \
  trainer.eval_before_train=true \
  trainer.eval_interval=$EVAL_INTERVAL \
  "$@"
