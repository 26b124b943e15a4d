"""The official `tinker` 0.38 client, unmodified, against `skyrl-tx serve` on 127.0.0.1: training, sampling,
checkpoints, loading with and without the optimizer, listing and deletion, and the RL losses."""

from __future__ import annotations

import math

import pytest
import tinker
from tinker import types

from skyrl_tx.cli import DEFAULT_BASE_MODEL as BASE_MODEL

pytestmark = [pytest.mark.integration]

KEY = "tml-client-flow"


@pytest.fixture(scope="module")
def service(tx_server):
    client = tinker.ServiceClient(base_url=tx_server.url, api_key=KEY)
    yield client
    client.close("success")  # POST sessions/{id}/finish: a 404 there would raise


@pytest.fixture(scope="module")
def tokenizer(service):
    training = service.create_lora_training_client(base_model=BASE_MODEL, rank=4).result()
    return training.get_tokenizer()


def sft_batch(tokenizer) -> list[types.Datum]:
    """Three answers to learn; weights 1 on the answer tokens only."""
    data = []
    for question, answer in [("12+34", "46"), ("7+8", "15"), ("50+25", "75")]:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        answer_ids = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
        tokens = prompt + answer_ids
        weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer_ids)
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
            )
        )
    return data


def train_step(training, data, lr=5e-3):
    backward = training.forward_backward(data, "cross_entropy")
    step = training.optim_step(types.AdamParams(learning_rate=lr, grad_clip_norm=10.0))
    return backward.result(), step.result()


def test_train_sample_save_load_list_and_delete(service, tokenizer, tx_server):
    training = service.create_lora_training_client(base_model=BASE_MODEL, rank=8, seed=1).result()
    info = training.get_info()
    assert info.model_data.model_name == BASE_MODEL and info.lora_rank == 8
    assert training.model_id.endswith(":train:1")  # {session}:train:{n}; n=0 made the tokenizer's client
    data = sft_batch(tokenizer)
    losses = []
    for _ in range(6):
        result, step = train_step(training, data)
        losses.append(result.metrics["loss:sum"])
        assert step.metrics["learning_rate:mean"] == pytest.approx(5e-3)
    # loss:sum is -sum(weight * logprob) over the returned per-token logprobs (of the weights before the step)
    for datum, output in zip(data, result.loss_fn_outputs):
        assert len(output["logprobs"].tolist()) == datum.model_input.length
    weighted = -sum(
        w * lp
        for datum, output in zip(data, result.loss_fn_outputs)
        for w, lp in zip(datum.loss_fn_inputs["weights"].tolist(), output["logprobs"].tolist())
    )
    assert result.metrics["loss:sum"] == pytest.approx(weighted, rel=1e-4)
    assert losses[-1] < 0.7 * losses[0], losses

    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(data[0].model_input.to_ints()[:-2])
    sampled = sampler.sample(
        prompt, num_samples=3, sampling_params=types.SamplingParams(max_tokens=6, temperature=1.0, seed=5)
    ).result()
    assert len(sampled.sequences) == 3
    for sequence in sampled.sequences:
        assert 1 <= len(sequence.tokens) <= 6 and sequence.stop_reason in ("stop", "length")
        assert len(sequence.logprobs) == len(sequence.tokens) and all(lp <= 0 for lp in sequence.logprobs)
    again = sampler.sample(
        prompt, num_samples=3, sampling_params=types.SamplingParams(max_tokens=6, temperature=1.0, seed=5)
    ).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in sampled.sequences]  # seeded

    named = training.save_weights_for_sampler("after-sft").result().path
    assert named == f"tinker://{training.model_id}/sampler_weights/after-sft"
    greedy = (
        service.create_sampling_client(model_path=named)
        .result()
        .sample(prompt, num_samples=1, sampling_params=types.SamplingParams(max_tokens=6, temperature=0.0))
    )
    assert greedy.result().sequences[0].tokens

    state = training.save_state("step6").result().path
    assert state == f"tinker://{training.model_id}/weights/step6"
    with_optimizer = service.create_training_client_from_state_with_optimizer(state).result()
    weights_only = service.create_training_client_from_state(state).result()
    assert with_optimizer.model_id != training.model_id and ":train:" in with_optimizer.model_id
    reference = training.forward(data, "cross_entropy").result().metrics["loss:sum"]
    for loaded in (with_optimizer, weights_only):
        assert loaded.forward(data, "cross_entropy").result().metrics["loss:sum"] == pytest.approx(reference, rel=1e-5)
    # one more step on each: the restored AdamW moments give the original's next loss, fresh ones do not
    after = {}
    for name, client in (("original", training), ("with_optimizer", with_optimizer), ("weights_only", weights_only)):
        train_step(client, data)
        after[name] = client.forward(data, "cross_entropy").result().metrics["loss:sum"]
    assert after["with_optimizer"] == pytest.approx(after["original"], rel=1e-4)
    assert abs(after["weights_only"] - after["original"]) > 1e-3 * abs(after["original"])

    rest = tinker.RestClient(base_url=tx_server.url, api_key=KEY)
    run = rest.get_training_run(training.model_id).result()
    assert run.base_model == BASE_MODEL and run.lora_rank == 8 and run.last_checkpoint.tinker_path == state
    listed = rest.list_checkpoints(training.model_id).result().checkpoints
    assert {c.tinker_path for c in listed} == {state, named}
    runs = rest.list_training_runs(limit=50).result()
    assert training.model_id in {r.training_run_id for r in runs.training_runs}
    assert rest.get_weights_info_by_tinker_path(state).result().lora_rank == 8
    rest.delete_checkpoint_from_tinker_path(named).result()
    assert {c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints} == {state}
    with pytest.raises(tinker.NotFoundError):
        service.create_sampling_client(model_path=named).result()


def test_rl_losses_use_the_samplers_logprobs(service, tokenizer):
    training = service.create_lora_training_client(base_model=BASE_MODEL, rank=4).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "3+4"}], add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    sampled = sampler.sample(
        types.ModelInput.from_ints(prompt), num_samples=4, sampling_params=types.SamplingParams(max_tokens=5)
    ).result()
    data, advantage_sum = [], 0.0
    for index, sequence in enumerate(sampled.sequences):
        tokens = prompt + list(sequence.tokens)
        advantage = 1.0 if index % 2 else -0.5
        n_prompt = len(prompt) - 1
        advantages = [0.0] * n_prompt + [advantage] * len(sequence.tokens)
        advantage_sum += advantage * len(sequence.tokens)
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "logprobs": [0.0] * n_prompt + list(sequence.logprobs),
                    "advantages": advantages,
                },
            )
        )
    # on-policy: the training forward reproduces the sampler's logprobs, so every ratio is 1 and the loss is -sum(A)
    for loss_fn in ("importance_sampling", "ppo"):
        result = training.forward(data, loss_fn).result()
        assert result.metrics["loss:sum"] == pytest.approx(-advantage_sum, abs=1e-3 * len(data) * 6)
        for datum, output in zip(data, result.loss_fn_outputs):
            sampled_part = datum.loss_fn_inputs["logprobs"].tolist()[len(prompt) - 1 :]
            assert output["logprobs"].tolist()[len(prompt) - 1 :] == pytest.approx(sampled_part, abs=1e-4)
    for loss_fn, config in (("importance_sampling", None), ("ppo", {"clip_high_threshold": 1.1}), ("cispo", None)):
        result = training.forward_backward(data, loss_fn, config).result()
        assert math.isfinite(result.metrics["loss:sum"])
        step = training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        assert step.metrics["grad_norm:mean"] > 0
    moved = training.forward(data, "importance_sampling").result().metrics["loss:sum"]
    assert abs(moved + advantage_sum) > 1e-2  # the steps changed the policy: ratios are no longer 1


def test_sampling_options_compute_logprobs_and_a_custom_loss(service, tokenizer):
    training = service.create_lora_training_client(base_model=BASE_MODEL, rank=4).result()
    data = sft_batch(tokenizer)
    prompt = data[0].model_input.to_ints()
    base = service.create_sampling_client(base_model=BASE_MODEL).result()

    # compute_logprobs (a 1-token sample with prompt logprobs) equals the training forward's logprobs
    scored = base.compute_logprobs(types.ModelInput.from_ints(prompt)).result()
    forward = training.forward(data[:1], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    assert scored[0] is None and scored[1:] == pytest.approx(forward[:-1], abs=1e-4)

    # stop tokens end a sequence on that token; stop=[] turns off even end-of-turn; top-k tables have k columns
    greedy = base.sample(
        types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=12, temperature=0.0, stop=[])
    ).result()
    tokens = greedy.sequences[0].tokens
    assert len(tokens) == 12 and greedy.sequences[0].stop_reason == "length"
    stopped = base.sample(
        types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=12, temperature=0.0, stop=[tokens[1]])
    ).result()
    assert stopped.sequences[0].tokens == tokens[: tokens.index(tokens[1]) + 1]
    assert stopped.sequences[0].stop_reason == "stop"
    text = tokenizer.decode(tokens[:3])
    by_string = base.sample(
        types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=12, temperature=0.0, stop=[text[-1]])
    ).result()
    assert by_string.sequences[0].stop_reason == "stop" and len(by_string.sequences[0].tokens) <= 3
    with_tables = base.sample(
        types.ModelInput.from_ints(prompt),
        2,
        types.SamplingParams(max_tokens=4, temperature=1.0, seed=3),
        include_prompt_logprobs=True,
        topk_prompt_logprobs=3,
        topk_sample_logprobs=2,
    ).result()
    assert len(with_tables.prompt_logprobs) == len(prompt)
    assert with_tables.topk_prompt_logprobs is not None and len(with_tables.topk_prompt_logprobs) == len(prompt)
    table = with_tables.sequences[0].topk_logprobs
    assert table is not None and len(table) == len(with_tables.sequences[0].tokens) and len(table[0]) == 2

    # forward_backward_custom: the client computes its own loss from the server's logprobs (needs loss:sum)
    import torch

    def mean_logprob_loss(batch, logprobs_list):
        loss = -torch.stack([lp.mean() for lp in logprobs_list]).mean()
        return loss, {"custom_nll": float(loss.detach())}

    custom = training.forward_backward_custom(data, mean_logprob_loss).result()
    assert math.isfinite(custom.metrics["loss:sum"]) and "custom_nll" in str(custom.metrics)
    assert training.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics["grad_norm:mean"] > 0
