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
  : "${RESUME_MODE:=latest}"            # a restarted run continues from its newest checkpoint
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
  : "${RESUME_MODE:=none}"              # every run starts from the embedded model
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
    "$PYTHON" "$SKYRL_TRAIN_EXAMPLES/local_inputs.py" "$1" --out "$OUT_DIR" --train-size "$TRAIN_SIZE"
  fi
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
