#!/usr/bin/env bash
# The Tinker-compatible service (skyrl-tx): LoRA training and sampling behind the Tinker REST API, driven by the
# official `tinker` client (SkyRL: examples/tinker/ppo/run_tinker_server.sh). See docs/skyrl-tx.md.
#
# CPU (NUM_GPUS unset): serves the embedded model on a free port with a fresh API key, then runs the example client
#   (examples/tinker/rl_loop.py: sample, reward, importance-sampling loss, optim_step) against it for MAX_STEPS
#   steps; held-out accuracy is printed before and after, and the server stops with the script.
#     bash examples/train/tinker/run_tinker.sh
# GPUs: serves MODEL under its name on NUM_GPUS Ray ranks (vLLM samples when installed) at PORT until stopped;
#   clients connect with TINKER_BASE_URL=http://<host>:$PORT and a key from API_KEYS_FILE.
#     NUM_GPUS=4 MODEL=/models/Qwen2.5-1.5B-Instruct API_KEYS_FILE=~/tx_keys bash examples/train/tinker/run_tinker.sh
# Arguments are `skyrl-tx serve` flags, applied last; --dry-run prints the service's settings and starts nothing.
set -euo pipefail
: "${RUN_NAME:=tinker}"
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

if [[ "$ON_GPU" == true ]]; then
  : "${MODEL:=$HOME/models/Qwen2.5-1.5B-Instruct}"  # a local Hugging Face folder; served under MODEL_NAME
  : "${MODEL_NAME:=Qwen/Qwen2.5-1.5B-Instruct}"
  : "${HOST:=0.0.0.0}"
  : "${PORT:=8000}"
  : "${CLIENT:=none}"                               # none: serve until stopped; rl_loop: run the example client
  TX_DIR="$CKPT_DIR"                                # checkpoints, the SQLite database, the key file
  SERVE=(--device cuda --compute ray --ray-workers "$NUM_GPUS")
else
  cpu_inputs addition
  : "${MODEL_NAME:=skyrl/embedded-arithmetic}"      # the name examples/tinker asks for
  : "${HOST:=127.0.0.1}"
  : "${PORT:=0}"                                    # 0: a free port, printed when the server is up
  : "${CLIENT:=rl_loop}"
  TX_DIR="$OUT_DIR/tx"
  SERVE=(--device cpu --compute local)
fi
: "${API_KEYS_FILE:=$TX_DIR/api_keys}"              # one accepted key per line; made with a fresh key if absent
if [[ "$DRY_RUN" == false && ! -s "$API_KEYS_FILE" ]]; then
  mkdir -p "$(dirname "$API_KEYS_FILE")"
  (umask 077 && "$PYTHON" -c 'import secrets; print("tml-" + secrets.token_hex(16))' >"$API_KEYS_FILE")
fi
SERVE=(-m skyrl_tx serve --base-model "$MODEL_NAME=$MODEL" --host "$HOST" --port "$PORT" --dtype "$DTYPE"
  --checkpoint-dir "$TX_DIR" --api-keys-file "$API_KEYS_FILE" "${SERVE[@]}")

if [[ "$DRY_RUN" == true || "$CLIENT" == none ]]; then
  "$PYTHON" "${SERVE[@]}" "$@"  # not exec: common.sh's EXIT trap stops background servers
else
  HEALTH_ROUTE=/healthz background_server "$OUT_DIR/server.log" "$PYTHON" "${SERVE[@]}" "$@"
  TINKER_API_KEY="$(head -n 1 "$API_KEYS_FILE")" "$PYTHON" "$SKYRL_TRAIN_EXAMPLES/../tinker/$CLIENT.py" \
    --base-url "$SERVER_URL" --steps "$MAX_STEPS" --eval-every 0
fi
