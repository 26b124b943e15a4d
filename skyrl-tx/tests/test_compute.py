"""`LoraHost` in process: the base weights' dtype (`--dtype`) and the adapters kept apart per training client."""

import numpy as np
import pytest
import torch

from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_tx.compute import LoraHost, LoraSpec, SampleJob
from skyrl_tx.wire import TrainDatum


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelSpec(vocab_size=len(tokenizer))).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    return str(folder)


def _data() -> list[TrainDatum]:
    tokens = list(range(5, 15))
    return [TrainDatum(tokens=tokens, inputs={"target_tokens": np.array(tokens[1:] + [3]), "weights": np.ones(10)})]


@pytest.mark.parametrize("dtype,expected", [("float32", torch.float32), ("bfloat16", torch.bfloat16)])
def test_the_dtype_flag_sets_the_base_weights_and_training_still_runs(model_dir, dtype, expected):
    host = LoraHost("org/tiny", model_dir, dtype=dtype)
    assert next(p for n, p in host.model.named_parameters() if "embed" in n).dtype == expected
    host.add_adapter("first", LoraSpec(rank=2, seed=0))
    outputs, metrics = host.forward_backward("first", _data(), "cross_entropy", {}, forward_only=False)
    assert outputs[0]["logprobs"].dtype == np.float32 and np.isfinite(metrics["loss:sum"])
    step = host.optim_step(
        "first",
        {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0},
    )
    assert step["grad_norm:mean"] > 0


def test_two_adapters_train_independently_on_one_base(model_dir):
    host = LoraHost("org/tiny", model_dir)
    host.add_adapter("first", LoraSpec(rank=2, seed=0))
    host.add_adapter("second", LoraSpec(rank=4, seed=1))
    before_second = host.forward_backward("second", _data(), "cross_entropy", {}, forward_only=True)[1]["loss:sum"]
    adam = {"learning_rate": 5e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0}
    for _ in range(3):
        host.forward_backward("first", _data(), "cross_entropy", {}, forward_only=False)
        host.optim_step("first", adam)
    after_first = host.forward_backward("first", _data(), "cross_entropy", {}, forward_only=True)[1]["loss:sum"]
    after_second = host.forward_backward("second", _data(), "cross_entropy", {}, forward_only=True)[1]["loss:sum"]
    assert after_second == pytest.approx(before_second, rel=1e-6)  # the second adapter and the base did not move
    assert after_first < before_second  # the first learned (both start as the base model: B = 0)


def test_sampler_weights_saved_again_under_the_same_folder_are_reloaded(model_dir, tmp_path):
    host = LoraHost("org/tiny", model_dir)
    host.add_adapter("first", LoraSpec(rank=2, seed=0))
    sampler = tmp_path / "sampler"
    host.save("first", sampler, with_optimizer=False)
    job = SampleJob(
        prompt=[5, 6, 7], num_samples=1, max_tokens=6, temperature=0.0, top_k=-1, top_p=1.0, seed=0, stop=None
    )
    before = host.sample(sampler, [job])[0].sequences[0]
    adam = {"learning_rate": 5e-1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0}
    for _ in range(3):
        host.forward_backward("first", _data(), "cross_entropy", {}, forward_only=False)
        host.optim_step("first", adam)
    # the same folder, new weights (save_weights_for_sampler overwrite)
    host.save("first", sampler, with_optimizer=False)
    fresh = LoraHost("org/tiny", model_dir).sample(sampler, [job])[0].sequences[0]
    again = host.sample(sampler, [job])[0].sequences[0]
    assert again.logprobs == pytest.approx(fresh.logprobs, abs=1e-5)  # what a host that never cached it samples
    assert again.logprobs != pytest.approx(before.logprobs, abs=1e-3)  # and not the cached old weights
    assert len(host.sampler_adapters) == 1  # the stale copy was dropped


ADAM = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "grad_clip_norm": 0}


def test_the_base_model_still_samples_after_every_adapter_is_unloaded(model_dir):
    job = SampleJob(
        prompt=[5, 6, 7], num_samples=2, max_tokens=4, temperature=1.0, top_k=-1, top_p=1.0, seed=3, stop=None
    )
    expected = LoraHost("org/tiny", model_dir).sample(None, [job])[0].sequences
    host = LoraHost("org/tiny", model_dir)
    for name in ("first", "second"):
        host.add_adapter(name, LoraSpec(rank=2, seed=0))
        host.forward_backward(name, _data(), "cross_entropy", {}, forward_only=False)
    for name in ("first", "second"):  # the sessions end: their adapters are unloaded, the last one being the active one
        host.remove_adapter(name)
        sampled = host.sample(None, [job])[0].sequences
        assert [row.tokens for row in sampled] == [row.tokens for row in expected]
    host.add_adapter("c", LoraSpec(rank=2, seed=0))  # a new training client joins; base sampling still works
    assert [row.tokens for row in host.sample(None, [job])[0].sequences] == [row.tokens for row in expected]
    host.forward_backward("c", _data(), "cross_entropy", {}, forward_only=False)
    assert host.optim_step("c", ADAM)["grad_norm:mean"] > 0  # and trains
