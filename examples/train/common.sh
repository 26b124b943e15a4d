# Sourced by the run scripts under examples/train (after they set RUN_NAME): picks CPU or GPU, sets the defaults the
# scripts share, and builds the CPU inputs. Every variable below can be set in the environment instead.
#
# GPU: NUM_GPUS is set. The script's Hugging Face model (MODEL) and your data (DATA_DIR) are used, vLLM generates,
#   bf16, SkyRL's GSM8K-scale batch sizes. Checkpoints under $HOME/ckpts/$RUN_NAME.
# CPU: NUM_GPUS is unset. The embedded tiny model and data written here by local_inputs.py (the model is warm-started
#   once and cached under $SKYRL_CACHE), everything under OUT_DIR (default outputs/train/$RUN_NAME). Two worker
#   processes stand in for two GPUs, the hf engine generates, fp32, small batches, MAX_STEPS steps.
# Both: PYTHON is the interpreter skyrl-train is installed in (default python); --dry-run among the script's arguments
#   prints the resolved config and exits, building and writing nothing.
# The scripts pass the overrides they all share through shared_overrides (below), after their own keys.

SKYRL_TRAIN_EXAMPLES="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${PYTHON:=python}"
DRY_RUN=false
for arg in "$@"; do [[ "$arg" == "--dry-run" ]] && DRY_RUN=true; done

if [[ -n "${NUM_GPUS:-}" ]]; then
  ON_GPU=true
  : "${INFERENCE_BACKEND:=vllm}"        # or hf (no extra install, slower), sglang
  : "${DTYPE:=bfloat16}"
  : "${GRADIENT_CHECKPOINTING:=true}"
  : "${TRAIN_BATCH_SIZE:=1024}"         # prompts per step
  : "${MINI_BATCH_SIZE:=256}"           # prompts per optimizer step
  : "${MICRO_BATCH_SIZE:=64}"           # sequences per forward/backward pass on one GPU
  : "${N_SAMPLES:=5}"                   # samples per prompt
  : "${MAX_PROMPT_LENGTH:=512}"
  : "${MAX_GENERATE_LENGTH:=1024}"
  : "${TEMPERATURE:=1.0}"
  : "${LR:=1.0e-6}"
  : "${EPOCHS:=20}"
  : "${MAX_STEPS:=null}"                # null: the epochs decide
  : "${EVAL_INTERVAL:=5}"
  : "${CKPT_INTERVAL:=10}"
  : "${EVAL_BATCH_SIZE:=1024}"          # held-out prompts generated per call
  : "${RESUME_MODE:=latest}"            # a restarted run continues from its newest checkpoint
  : "${USE_KL_LOSS:=true}"              # a KL loss to the reference model
  : "${GPU_MEMORY_UTILIZATION:=0.8}"    # the share of each GPU an engine may take
  : "${LOGGER:=wandb}"                  # wandb needs `wandb login` (or WANDB_MODE=offline); or console
  : "${CKPT_DIR:=$HOME/ckpts/$RUN_NAME}"
  : "${EXPORT_DIR:=$HOME/exports/$RUN_NAME}"
  : "${LOG_DIR:=$HOME/skyrl-logs/$RUN_NAME}"
else
  ON_GPU=false
  unset NUM_GPUS; NUM_GPUS=2            # worker processes (each FSDP2 rank and engine takes one)
  : "${OUT_DIR:=$PWD/outputs/train/$RUN_NAME}"
  : "${INFERENCE_BACKEND:=hf}"
  : "${DTYPE:=float32}"
  : "${GRADIENT_CHECKPOINTING:=false}"
  : "${TRAIN_BATCH_SIZE:=32}"
  : "${MINI_BATCH_SIZE:=16}"
  : "${MICRO_BATCH_SIZE:=64}"
  : "${N_SAMPLES:=8}"
  : "${MAX_PROMPT_LENGTH:=64}"
  : "${MAX_GENERATE_LENGTH:=8}"         # a 2-digit sum and the end-of-turn token
  : "${TEMPERATURE:=1.0}"
  : "${LR:=2.0e-4}"
  : "${EPOCHS:=100}"
  : "${MAX_STEPS:=30}"
  : "${EVAL_INTERVAL:=$MAX_STEPS}"      # held-out accuracy before training and at the end
  : "${CKPT_INTERVAL:=0}"               # 0: no checkpoints (the final model is exported to EXPORT_DIR)
  : "${EVAL_BATCH_SIZE:=1024}"
  : "${RESUME_MODE:=none}"              # every run starts from the embedded model
  : "${USE_KL_LOSS:=false}"             # no reference model: on CPU every role is two more processes on two cores
  : "${GPU_MEMORY_UTILIZATION:=0.8}"
  : "${LOGGER:=console}"
  : "${TRAIN_SIZE:=2000}"
  : "${CKPT_DIR:=$OUT_DIR/ckpts}"
  : "${EXPORT_DIR:=$OUT_DIR/exports}"
  : "${LOG_DIR:=$OUT_DIR/logs}"
fi

# cpu_inputs KIND: MODEL and DATA_DIR of a CPU run, built by local_inputs.py (skipped by --dry-run) under OUT_DIR
cpu_inputs() {
  MODEL="$OUT_DIR/model"
  DATA_DIR="$OUT_DIR/data"
  if [[ "$DRY_RUN" == false ]]; then
    "$PYTHON" "$SKYRL_TRAIN_EXAMPLES/local_inputs.py" "$1" --out "$OUT_DIR" --train-size "$TRAIN_SIZE" \
      ${TEST_SIZE:+--test-size "$TEST_SIZE"}
  fi
}

# gsm8k_inputs [KIND]: DATA_DIR, MODEL and ENV_CLASS of the scripts that train on GSM8K: on GPUs its data (written by
# python examples/gsm8k/gsm8k_dataset.py --from-hf-cache --output-dir $HOME/data/gsm8k) and Qwen2.5-1.5B-Instruct, on
# CPU its twin, 2-digit addition (or the local_inputs.py KIND given), and the embedded model.
gsm8k_inputs() {
  if [[ "$ON_GPU" == true ]]; then
    : "${DATA_DIR:=$HOME/data/gsm8k}"
    : "${MODEL:=Qwen/Qwen2.5-1.5B-Instruct}"
    : "${ENV_CLASS:=gsm8k}"
  else
    cpu_inputs "${1:-addition}"
    : "${ENV_CLASS:=addition}"
  fi
}

# shared_overrides colocated | shared_overrides separate POLICY_GPUS ENGINES: set SHARED_OVERRIDES to the config
# overrides every run script passes, read from the variables above and the script's own (MODEL, DATA_DIR, ...), so
# call it once the script has set them. DATA_DIR's train.parquet and test.parquet are the data; a script whose
# entrypoint writes its own data leaves DATA_DIR unset. Colocated, the policy, the reference model and NUM_GPUS inference engines take
# turns on NUM_GPUS devices; separate, the policy and the reference model train on POLICY_GPUS devices while ENGINES
# engines (of one device each) generate.
shared_overrides() {
  local colocate_all=true policy_gpus=$NUM_GPUS engines=$NUM_GPUS
  if [[ "$1" == separate ]]; then
    colocate_all=false policy_gpus=$2 engines=$3
  elif [[ "$1" != colocated ]]; then
    echo "error: shared_overrides takes colocated or separate, not '$1'" >&2
    exit 2
  fi
  SHARED_OVERRIDES=()
  if [[ -n "${DATA_DIR:-}" ]]; then
    SHARED_OVERRIDES+=(data.train_data="['$DATA_DIR/train.parquet']" data.val_data="['$DATA_DIR/test.parquet']")
  fi
  SHARED_OVERRIDES+=(
    trainer.policy.model.path="$MODEL"
    trainer.strategy=fsdp2
    trainer.placement.colocate_all=$colocate_all
    trainer.placement.policy_num_gpus_per_node="$policy_gpus"
    trainer.placement.ref_num_gpus_per_node="$policy_gpus"
    generator.inference_engine.num_engines="$engines"
    generator.inference_engine.tensor_parallel_size=1
    generator.inference_engine.backend="$INFERENCE_BACKEND"
    generator.inference_engine.weight_sync_backend=auto
    generator.inference_engine.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"
    generator.inference_engine.model_dtype="$DTYPE"
    trainer.policy.fsdp_config.mixed_precision.param_dtype="$DTYPE"
    trainer.ref.fsdp_config.mixed_precision.param_dtype="$DTYPE"
    trainer.gradient_checkpointing="$GRADIENT_CHECKPOINTING"
    trainer.epochs="$EPOCHS"
    trainer.max_training_steps="$MAX_STEPS"
    trainer.update_epochs_per_batch=1
    trainer.train_batch_size="$TRAIN_BATCH_SIZE"
    trainer.policy_mini_batch_size="$MINI_BATCH_SIZE"
    trainer.micro_forward_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    trainer.micro_train_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    trainer.max_prompt_length="$MAX_PROMPT_LENGTH"
    generator.sampling_params.max_generate_length="$MAX_GENERATE_LENGTH"
    generator.sampling_params.temperature="$TEMPERATURE"
    generator.n_samples_per_prompt="$N_SAMPLES"
    trainer.policy.optimizer_config.lr="$LR"
    trainer.algorithm.use_kl_loss="$USE_KL_LOSS"
    trainer.logger="$LOGGER"
    trainer.run_name="$RUN_NAME"
    trainer.ckpt_interval="$CKPT_INTERVAL"
    trainer.resume_mode="$RESUME_MODE"
    trainer.ckpt_path="$CKPT_DIR"
    trainer.export_path="$EXPORT_DIR"
    trainer.log_path="$LOG_DIR"
    trainer.eval_batch_size="$EVAL_BATCH_SIZE"
    trainer.eval_before_train=true
    trainer.eval_interval="$EVAL_INTERVAL"
  )
}

# multi_turn_overrides: set MULTI_TURN_OVERRIDES to the keys of a run whose env answers the model over several turns:
# one conversation per engine call, at most MAX_TURNS model turns, MAX_INPUT_LENGTH for the whole conversation.
multi_turn_overrides() {
  MULTI_TURN_OVERRIDES=(
    generator.batched=false
    generator.max_turns="$MAX_TURNS"
    generator.max_input_length="$MAX_INPUT_LENGTH"
  )
}

# background_server LOG COMMAND...: start COMMAND in the background (output in LOG; stopped when the script exits),
# wait for the first http://host:port it prints and for that URL's health route ($HEALTH_ROUTE, default /health) to
# answer, and set SERVER_URL to it.
# A script that starts one must run its trainer without `exec`: the EXIT trap that stops the servers dies with exec.
SERVER_PIDS=()
stop_servers() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_servers EXIT
trap 'exit 130' INT TERM
background_server() {
  local log="$1"
  shift
  mkdir -p "$(dirname "$log")"
  "$@" >"$log" 2>&1 &
  SERVER_PIDS+=("$!")
  SERVER_URL=""
  local waited
  for ((waited = 0; waited < 1800; waited++)); do  # 15 minutes: a first start may build the embedded model
    if ! kill -0 "${SERVER_PIDS[-1]}" 2>/dev/null; then
      echo "error: '$*' exited; the end of $log:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    [[ -n "$SERVER_URL" ]] || SERVER_URL="$(grep -o -m 1 'http://[0-9.]*:[0-9]*' "$log" || true)"
    if [[ -n "$SERVER_URL" ]] && curl -sf -o /dev/null "$SERVER_URL${HEALTH_ROUTE:-/health}"; then
      echo "started $1 ... at $SERVER_URL (log: $log)" >&2
      return 0
    fi
    sleep 0.5
  done
  echo "error: '$*' did not answer $SERVER_URL${HEALTH_ROUTE:-/health} within 15 minutes; see $log" >&2
  exit 1
}
