"""`BasePPOExp.prepare`: what a run does before Ray starts. Data keys reach the datasets and the loader, registry names
(the config's and the dataset rows') are checked, and a step cap the epochs cannot reach is reported."""

import importlib.util
import json
import logging
from types import SimpleNamespace

import httpx
import pytest
import ray

from skyrl_train.config import ConfigValidationError, SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp, warn_if_epochs_end_first
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
from skyrl_train.inference.gate import WeightGate
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.serving.listen import spare_port


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer")
    build_char_tokenizer().save_pretrained(str(path))
    return str(path)


def _write_rows(path, count, prompt_key="prompt", env_class_key="env_class", env_class="arithmetic", long_every=0):
    with open(path, "w") as f:
        for i in range(count):
            content = f"What is {i}+1?" + ("x" * 300 if long_every and i % long_every == 0 else "")
            row = {
                prompt_key: [{"role": "user", "content": content}],
                "reward_spec": {"method": "rule", "ground_truth": str(i + 1)},
                "data_source": "unit",
            }
            if env_class is not None:
                row[env_class_key] = env_class
            f.write(json.dumps(row) + "\n")
    return str(path)


def _experiment(tokenizer_dir, *overrides):
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cpu",
            f"trainer.policy.model.path={tokenizer_dir}",
            "trainer.train_batch_size=4",
            "trainer.policy_mini_batch_size=4",
            "generator.n_samples_per_prompt=2",
            "data.max_prompt_length=100",
            *overrides,
        ]
    )
    return BasePPOExp(cfg)


def test_data_keys_reach_the_datasets_and_the_loader(tmp_path, tokenizer_dir):
    train = _write_rows(tmp_path / "train.jsonl", 10, long_every=5)  # rows 0 and 5 are too long
    val = _write_rows(tmp_path / "val.jsonl", 3)
    experiment = _experiment(
        tokenizer_dir,
        f"data.train_data=['{train}']",
        f"data.val_data=['{val}']",
        "data.shuffle=false",
        "trainer.train_batch_size=4",
    )
    experiment.prepare()
    assert len(experiment.train_dataset) == 8 and experiment.train_dataset.num_too_long == 2
    assert [item["uid"] for item in experiment.eval_items] == ["0:0", "0:1", "0:2"]
    first = experiment.train_loader.next_batch()
    assert [item["uid"] for item in first] == ["0:1", "0:2", "0:3", "0:4"]  # unshuffled, batches of 4
    assert len(experiment.train_loader) == 2 and experiment.total_steps == 2

    longer = _experiment(
        tokenizer_dir, f"data.train_data=['{train}']", "data.val_data=[]", "data.max_prompt_length=400"
    )
    longer.prepare()
    assert len(longer.train_dataset) == 10 and longer.eval_items == []

    orders = []
    for seed in (1, 2):
        shuffled = _experiment(tokenizer_dir, f"data.train_data=['{train}']", "data.val_data=[]", f"data.seed={seed}")
        shuffled.prepare()
        orders.append([item["uid"] for item in shuffled.train_loader.next_batch()])
    assert orders[0] != orders[1]  # data.shuffle (default true) with data.seed decides the order


def test_custom_columns_and_the_default_env_class(tmp_path, tokenizer_dir):
    custom = _write_rows(tmp_path / "custom.jsonl", 4, prompt_key="question", env_class_key="task", env_class="reverse")
    bare = _write_rows(tmp_path / "bare.jsonl", 4, prompt_key="question", env_class=None)
    experiment = _experiment(
        tokenizer_dir,
        f"data.train_data=['{custom}']",
        f"data.val_data=['{bare}']",
        "data.prompt_key=question",
        "data.env_class_key=task",
        "environment.env_class=countdown",
    )
    experiment.prepare()
    item = experiment.train_dataset[0]
    assert item["env_class"] == "reverse" and item["prompt"][0]["content"] == "What is 0+1?"
    assert {item["env_class"] for item in experiment.eval_items} == {"countdown"}


def test_unregistered_env_class_in_the_rows_fails_before_ray_starts(tmp_path, tokenizer_dir):
    rows = _write_rows(tmp_path / "rows.jsonl", 4, env_class="arithmetik")
    experiment = _experiment(tokenizer_dir, f"data.train_data=['{rows}']", "data.val_data=[]")
    started_before = ray.is_initialized()
    with pytest.raises(ConfigValidationError) as info:
        experiment.run()
    (problem,) = info.value.problems
    assert "env_class 'arithmetik' of the dataset rows (train data, 4 row(s), first uid 0:0)" in problem
    assert "Did you mean 'arithmetic'" in problem
    assert ray.is_initialized() == started_before  # failed before init_ray


def test_unregistered_config_name_fails_before_the_data_loads(tokenizer_dir):
    experiment = _experiment(tokenizer_dir, "trainer.algorithm.policy_loss_type=regulr", "data.train_data=['/missing']")
    with pytest.raises(ConfigValidationError, match="policy_loss_type='regulr' is not a registered policy loss"):
        experiment.prepare()


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_an_engine_backend_that_cannot_run_here_fails_before_the_data_loads(tokenizer_dir):
    experiment = _experiment(
        tokenizer_dir,
        "trainer.device=cuda",
        "generator.inference_engine.backend=sglang",
        "data.train_data=['/missing']",
    )
    with pytest.raises(ImportError, match="backend=sglang needs the sglang package"):
        experiment.prepare()


def test_a_step_cap_beyond_the_epochs_is_reported_at_start_up(tmp_path, tokenizer_dir, caplog):
    train = _write_rows(tmp_path / "train.jsonl", 12)
    experiment = _experiment(
        tokenizer_dir, f"data.train_data=['{train}']", "data.val_data=[]", "trainer.max_training_steps=7"
    )
    with caplog.at_level(logging.WARNING, logger="skyrl_train.entrypoints.main_base"):
        experiment.prepare()
    assert experiment.total_steps == 3  # 1 epoch x 3 batches of 4
    (record,) = [r for r in caplog.records if "max_training_steps" in r.getMessage()]
    assert record.getMessage().startswith(
        "trainer.max_training_steps=7 is more than trainer.epochs (1) x 3 batches per epoch = 3 steps: the run stops"
        " after 3 steps"
    )
    assert "Set trainer.epochs=3 to reach 7 steps" in record.getMessage()


def test_no_report_when_the_cap_fits():
    cfg = SkyRLConfig.from_cli_overrides(["trainer.max_training_steps=300", "trainer.epochs=2"])
    assert warn_if_epochs_end_first(cfg, 250) is None
    message = warn_if_epochs_end_first(SkyRLConfig.from_cli_overrides(["trainer.max_training_steps=300"]), 250)
    assert "= 250 steps" in message and "trainer.epochs=2 to reach 300" in message
    assert warn_if_epochs_end_first(SkyRLConfig(), 250) is None  # no cap


@pytest.mark.parametrize("loggers", [["jsonl"], ["console", "jsonl"]])
def test_tracker_starts_with_or_without_the_console(tmp_path, tokenizer_dir, loggers):
    # A run that logs only to a file used to crash here: the console's progress-bar option was passed even when
    # the console was not among the backends.
    experiment = _experiment(
        tokenizer_dir, f"trainer.logger={json.dumps(loggers)}", f"trainer.log_path={tmp_path}", "trainer.run_name=r"
    )
    tracker = experiment.get_tracker(total_steps=3)
    tracker.log({"reward/mean": 0.5}, step=1)
    tracker.finish()
    lines = (tmp_path / "jsonl" / experiment.cfg.trainer.project_name / "r.jsonl").read_text().splitlines()
    assert [json.loads(line)["reward/mean"] for line in lines] == [0.5]


def test_the_generator_takes_the_training_prompts_ids_from_the_length_check(tmp_path, tokenizer_dir):
    from skyrl_train.generators import GeneratorSettings, SkyRLGymGenerator

    train = _write_rows(tmp_path / "train.jsonl", 6, long_every=5)  # rows 0 and 5 are too long
    experiment = _experiment(tokenizer_dir, f"data.train_data=['{train}']", "data.val_data=[]")
    experiment.prepare()
    generator = SkyRLGymGenerator(None, experiment.tokenizer, GeneratorSettings(batched=True))
    experiment.share_prompt_ids(generator)
    assert len(generator.prompt_ids) == len(experiment.train_dataset) == 4


def test_the_endpoint_keys_reach_the_served_app(tokenizer_dir, monkeypatch):
    """`generator.http_endpoint.api_key_env` and `max_request_mb`: the endpoint a run starts (a real server on
    127.0.0.1) wants the key held by the named variable and caps request bodies; a named variable that is unset stops
    the run in `prepare`, before Ray starts or the data loads."""
    port = spare_port()
    experiment = _experiment(
        tokenizer_dir,
        "generator.http_endpoint.enabled=true",
        f"generator.http_endpoint.port={port}",
        "generator.http_endpoint.api_key_env=SKYRL_TEST_ENDPOINT_KEY",
        "generator.http_endpoint.max_request_mb=0.01",
        "data.train_data=['/missing']",
    )
    monkeypatch.delenv("SKYRL_TEST_ENDPOINT_KEY", raising=False)
    with pytest.raises(ValueError, match="api_key_env='SKYRL_TEST_ENDPOINT_KEY', but that environment variable is"):
        experiment.prepare()
    monkeypatch.setenv("SKYRL_TEST_ENDPOINT_KEY", "sk-run")
    tokenizer = build_char_tokenizer()
    client = InferenceEngineClient([HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=0), tokenizer)])
    endpoint = experiment.start_http_endpoint(client, tokenizer, SimpleNamespace(endpoint_gate=WeightGate()))
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer sk-run"}
    try:
        assert httpx.get(f"{base}/v1/models").status_code == 401
        assert httpx.get(f"{base}/v1/models", headers=auth).status_code == 200
        too_big = httpx.post(f"{base}/v1/completions", content=b"x" * 20_000, headers=auth)
        assert too_big.status_code == 413 and "limit of 10485 bytes" in too_big.json()["detail"]
    finally:
        endpoint.stop()
