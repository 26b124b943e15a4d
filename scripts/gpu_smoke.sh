#!/usr/bin/env bash
# One command for GPU users: every GPU-only path of the project, each a timed item with a PASS/FAIL/SKIP line, then
# a summary table and a JSON report (gpu_smoke_logs/report.json); exit status 1 when an item failed. docs/gpu.md says
# what each item covers and what the CPU CI checks instead.
#
#   bash scripts/gpu_smoke.sh                  # one GPU: every one-GPU item (under 10 minutes once the venvs exist)
#   bash scripts/gpu_smoke.sh --gpus 2         # + colocated cuda_ipc on 2 GPUs (M1), NCCL broadcast, Megatron PP=2
#   bash scripts/gpu_smoke.sh --gpus 3 --tp 2  # + vLLM and SGLang engines with tensor parallelism 2
#   bash scripts/gpu_smoke.sh grpo_vllm        # only the named items
#   bash scripts/gpu_smoke.sh --dry-run        # the plan, on any machine
#
# Items run in two venvs, one per torch pin: .venv (torch 2.13.0, vLLM 0.32) and .venv-sglang (torch 2.14.1, SGLang
# 0.5.23), both with megatron-core 0.16.1; one that lacks its engine is set up first with `scripts/setup.sh --gpu
# vllm|sglang` (docs/gpu-setup.md). $SKYRL_GPU_VLLM_VENV / $SKYRL_GPU_SGLANG_VENV point elsewhere. The orchestrator
# itself needs only python3 (standard library): scripts/gpu_smoke.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${PYTHON:-python3}" "$ROOT/scripts/gpu_smoke.py" "$@"
