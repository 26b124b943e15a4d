"""`python -m skyrl_train.entrypoints.serve` as a user runs it: a server process the openai client talks to."""

import os
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from skyrl_train.entrypoints.serve import main, served_name
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
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SKYRL_API_KEY": "sk-proc"}  # the key, out of the process list
    command = [
        *(sys.executable, "-m", "skyrl_train.entrypoints.serve", "--model", str(model_dir), "--port", str(port)),
        *("--max-request-mb", "1"),
    ]
    process = subprocess.Popen(
        [*command, "generator.inference_engine.model_dtype=float32", "trainer.seed=5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-proc", max_retries=0, timeout=60)
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
        with pytest.raises(openai.AuthenticationError):
            client.with_options(api_key="sk-other").models.list()
        with pytest.raises(openai.APIStatusError) as too_big:
            client.completions.create(model="skyrl/tiny", prompt="1", max_tokens=1, user="A" * (2 << 20))
        assert too_big.value.status_code == 413
        docs = httpx.get(f"http://127.0.0.1:{port}/openapi.json", headers={"Authorization": "Bearer sk-proc"})
        assert docs.status_code == 404
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


@pytest.mark.parametrize(
    "argv, environ, message",
    [
        (["--enable-weight-updates"], {}, "--enable-weight-updates needs a token"),
        (["--weight-update-token", "t"], {}, "--weight-update-token only apply with --enable-weight-updates"),
        (["--enable-weight-updates", "--api-key", "k", "--weight-update-root", "/nowhere"], {}, "is not a folder"),
        (["--max-request-mb", "0"], {}, "--max-request-mb must be > 0, got 0.0"),
    ],
)
def test_flags_that_would_leave_a_route_open_or_do_nothing_are_refused(argv, environ, message, capsys, monkeypatch):
    for name in ("SKYRL_API_KEY", "SKYRL_WEIGHT_UPDATE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["--model", "/nowhere", *argv])  # refused while parsing: the model is never read
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_keys_come_from_the_flags_else_the_environment(tmp_path):
    from skyrl_train.entrypoints.serve import access_from_args

    def access(*argv, environ=None):
        import argparse

        args = argparse.Namespace(
            api_key=None, weight_update_token=None, weight_update_root=None, enable_weight_updates=False,
            max_request_mb=16.0, enable_docs=False,
        )  # fmt: skip
        for flag, value in zip(argv[::2], argv[1::2]):
            setattr(args, flag, value)
        return access_from_args(args, environ or {})

    assert access().api_key is None and access().update_token is None
    assert access(environ={"SKYRL_API_KEY": "env-key"}).api_key == "env-key"
    assert access("api_key", "flag-key", environ={"SKYRL_API_KEY": "env-key"}).api_key == "flag-key"
    weights = access("enable_weight_updates", True, environ={"SKYRL_WEIGHT_UPDATE_TOKEN": "w", "SKYRL_API_KEY": "k"})
    assert (weights.api_key, weights.update_token) == ("k", "w")
    assert access("enable_weight_updates", True, "api_key", "k").update_token == "k"
    # a token in the environment means nothing without --enable-weight-updates
    assert access(environ={"SKYRL_WEIGHT_UPDATE_TOKEN": "w"}).update_token is None
    rooted = access("enable_weight_updates", True, "api_key", "k", "weight_update_root", str(tmp_path))
    assert rooted.weight_update_root == str(tmp_path)
