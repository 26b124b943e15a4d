"""`python -m skyrl_train.entrypoints.serve` as a user runs it: a server process the openai client talks to."""

import os
import socket
import subprocess
import sys
import time

import openai
import pytest

from skyrl_train.entrypoints.serve import served_name
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.serving.listen import spare_port


def test_served_name_defaults_to_the_folder():
    assert served_name("/models/qwen-0.5b/", None) == "skyrl/qwen-0.5b"
    assert served_name("/models/x", "me/mine") == "me/mine"


@pytest.mark.integration
def test_the_server_process_answers_the_openai_client(tmp_path):
    model_dir = tmp_path / "tiny"
    build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained(model_dir)
    save_tokenizer(build_char_tokenizer(), str(model_dir))
    port = spare_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "skyrl_train.entrypoints.serve", "--model", str(model_dir), "--port", str(port)]
    process = subprocess.Popen(
        [*command, "generator.inference_engine.model_dtype=float32", "trainer.seed=5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
        deadline = time.monotonic() + 120
        while True:
            try:
                models = client.models.list()
                break
            except openai.APIConnectionError:
                assert process.poll() is None, process.stdout.read()[-3000:]
                assert time.monotonic() < deadline, "the server did not come up in 120 s"
                time.sleep(0.5)
        assert [m.id for m in models.data] == ["skyrl/tiny"]
        reply = client.chat.completions.create(
            model="skyrl/tiny", messages=[{"role": "user", "content": "1+1="}], max_tokens=3
        )
        assert reply.choices[0].model_extra["token_ids"] and reply.usage.completion_tokens >= 1
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_overrides_must_be_key_value():
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_train.entrypoints.serve", "--model", "/nowhere", "oops"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "overrides must be key=value, got ['oops']" in done.stderr


def test_a_taken_port_is_refused_before_the_model_loads(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(  # a model folder that does not exist: reaching it would fail with another message
            [
                sys.executable,
                "-m",
                "skyrl_train.entrypoints.serve",
                "--model",
                str(tmp_path / "none"),
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0 and f"--port {port}: cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr
