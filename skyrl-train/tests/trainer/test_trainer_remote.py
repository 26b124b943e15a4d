"""The trainer with `generator.inference_engine.backend=remote` against our own server started as a separate process
(`python -m skyrl_train.entrypoints.serve --enable-weight-updates`): rollouts come over HTTP, every step's weights
are written for the server, loaded by it and verified by checksum, and the next step samples what the trainer holds.
The same run against a real `vllm serve` is in test_trainer_remote_vllm.py."""

import os
import sys

import pytest

from skyrl_train.serving.listen import spare_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_training_through_our_own_server(ray_cluster, make_config, remote_run, tmp_path):
    model = remote_run.model_dir()
    port = spare_port()  # not drawn by bind(0): Ray and vLLM cannot take it before the server binds it
    command = [
        sys.executable, "-m", "skyrl_train.entrypoints.serve", "--enable-weight-updates", "--model", model,
        "--port", str(port), "generator.inference_engine.model_dtype=float32", "trainer.device=cpu",
    ]  # fmt: skip
    env = {**os.environ, "SKYRL_WEIGHT_UPDATE_TOKEN": "sk-weights"}  # the weight routes need a token
    token = "generator.inference_engine.engine_init_kwargs={weight_update_token: sk-weights}"
    remote_run.train_through(make_config, tmp_path, model, command, port, env=env, extra=(token,))
