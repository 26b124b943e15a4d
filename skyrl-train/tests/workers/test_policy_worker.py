"""PolicyWorker and RefWorker in-process (world size 1): forward, exact micro-batch accumulation, metrics, LR."""

import pytest
import torch

from skyrl_train.algorithms.masked import zero_masked
from skyrl_train.models.loading import load_causal_lm
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.workers import PolicyWorker, RefWorker


def _policy(config, group, cls=PolicyWorker, role="policy", **init):
    worker = cls(role, 0, 1, *group, config, num_threads=1)
    worker.init_model(**init)
    return worker


def test_forward_matches_a_plain_hf_forward(single_rank_group, worker_config, tiny_model_dir, make_batch):
    batch = make_batch(rows=5)
    config = worker_config("trainer.micro_forward_batch_size_per_gpu=2", "generator.sampling_params.temperature=0.7")
    worker = _policy(config, single_rank_group, RefWorker, role="ref")
    logprobs = worker.forward(batch)
    model = load_causal_lm(tiny_model_dir).eval()
    with torch.no_grad():
        expected, _ = response_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width, temperature=0.7
        )
    expected = zero_masked(expected, batch.response_mask)
    # Micro-batches of 2 rows, each trimmed of its all-padding columns, versus one untrimmed pass.
    assert torch.allclose(logprobs, expected, atol=1e-5), (logprobs - expected).abs().max()
    assert logprobs[batch.response_mask == 0].abs().sum() == 0


@pytest.mark.parametrize("split", ["trainer.micro_train_batch_size_per_gpu=3", "trainer.max_tokens_per_microbatch=30"])
def test_micro_batches_give_the_whole_batch_gradient(
    single_rank_group, worker_config, make_batch, grpo_advantages, parameter_values, full_gradients, split
):
    batch = make_batch(rows=6, seed=1)
    advantages = grpo_advantages(batch)
    old = batch.rollout_logprobs + 0.05 * batch.response_mask  # ratios != 1 so clipping is exercised

    def one_update(config):
        worker = _policy(config, single_rank_group)
        metrics = worker.forward_backward(batch, advantages, old)
        gradients = full_gradients(worker)
        grad_norm = worker.optim_step()
        return metrics, gradients, grad_norm, parameter_values(worker)

    whole = one_update(worker_config())
    split_up = one_update(worker_config(split))
    # The same float32 sums in another order: gradients agree to ~1e-6 relative (rtol 1e-4 leaves room), and so do
    # the loss and the grad norm.
    for name, grad in whole[1].items():
        assert torch.allclose(split_up[1][name], grad, rtol=1e-4, atol=1e-7), name
    assert split_up[2] == pytest.approx(whole[2], rel=1e-5)
    assert split_up[0]["policy/loss"] == pytest.approx(whole[0]["policy/loss"], rel=1e-5)
    # AdamW's first step moves each weight by lr * g / (|g| + eps): for |g| near eps = 1e-8 summation-order noise
    # can flip the step's sign (a difference of up to 2 * lr), so compare the update only where |g| >= 1e-5, where
    # the noise changes g / |g| by less than 1e-6 relative (weights then agree to lr * 1e-6 plus float rounding).
    compared = 0
    for name, value in whole[3].items():
        if name not in whole[1]:
            continue  # a tied alias of a compared parameter (lm_head.weight is embed_tokens.weight)
        clear = whole[1][name].abs() >= 1e-5
        assert torch.allclose(split_up[3][name][clear], value[clear], atol=1e-7), name
        compared += int(clear.sum())
    assert compared > 1000  # most weights have a clear gradient: the check is not vacuous


def test_update_metrics_and_grad_norm(
    single_rank_group, worker_config, make_batch, grpo_advantages, parameter_values, full_gradients
):
    batch = make_batch(rows=4, seed=2)
    worker = _policy(
        worker_config("trainer.algorithm.use_kl_loss=true", "trainer.algorithm.kl_loss_coef=0.5"), single_rank_group
    )
    before = parameter_values(worker)
    old = worker.forward(batch)
    ref = old - 0.1 * batch.response_mask
    metrics = worker.forward_backward(batch, grpo_advantages(batch), old, ref_logprobs=ref)
    expected_keys = {"loss", "kl_loss", "total_loss", "kl_vs_ref", "entropy", "approx_kl", "clip_frac", "lr"}
    assert {f"policy/{key}" for key in expected_keys} <= set(metrics)
    assert metrics["policy/approx_kl"] == pytest.approx(0.0, abs=1e-6)  # old log-probs are the current ones
    assert metrics["policy/kl_vs_ref"] > 0 and metrics["policy/lr"] == pytest.approx(1e-3)
    # rollout log-probs (-4.5 + 0.1 j) are not the model's: the mean |difference| is reported.
    expected_diff = ((old - batch.rollout_logprobs).abs() * batch.loss_mask).sum() / batch.loss_mask.sum()
    assert metrics["policy/logprob_diff_vs_rollout"] == pytest.approx(float(expected_diff), rel=1e-4)
    by_hand = torch.sqrt(sum((g.double() ** 2).sum() for g in full_gradients(worker).values()))
    grad_norm = worker.optim_step()
    assert grad_norm == pytest.approx(float(by_hand), rel=1e-5)  # the norm before clipping
    after = parameter_values(worker)
    assert any(not torch.equal(before[name], after[name]) for name in before)


@pytest.mark.parametrize("correction", [[], ["trainer.algorithm.off_policy_correction.tis_ratio_type=token"]])
def test_on_policy_update_needs_no_old_logprob_forward(
    single_rank_group, worker_config, make_batch, grpo_advantages, full_gradients, correction
):
    """One optimizer step: the old (proximal) log-probs are the current ones, so `on_policy=True` (old taken from the
    update's own forward, detached) gives the gradient of the update fed a separate forward's log-probs. The batch's
    rollout log-probs are not the model's (as with stale async data), and truncated importance sampling against
    them gives the same update either way."""
    batch = make_batch(rows=6, seed=3)
    advantages = grpo_advantages(batch)
    config = worker_config("trainer.micro_train_batch_size_per_gpu=4", *correction)
    separate = _policy(config, single_rank_group)
    expected_metrics = separate.forward_backward(batch, advantages, separate.forward(batch))
    expected = full_gradients(separate)
    fused = _policy(config, single_rank_group)
    metrics = fused.forward_backward(batch, advantages, None, on_policy=True)
    gradients = full_gradients(fused)
    # Same weights, same rows: the two passes differ only by eval- vs train-mode forward order of float sums.
    for name, grad in expected.items():
        assert torch.allclose(gradients[name], grad, rtol=1e-4, atol=1e-7), name
    assert metrics["policy/approx_kl"] == pytest.approx(0.0, abs=1e-7) and metrics["policy/clip_frac"] == 0.0
    assert metrics["policy/loss"] == pytest.approx(expected_metrics["policy/loss"], rel=1e-4, abs=1e-7)
    with pytest.raises(ValueError, match="on_policy=True"):
        fused.forward_backward(batch, advantages, batch.rollout_logprobs, on_policy=True)


def test_warmup_schedule_and_scheduler_errors(single_rank_group, worker_config, make_batch, grpo_advantages):
    config = worker_config("trainer.policy.optimizer.num_warmup_steps=2")
    worker = _policy(config, single_rank_group)
    batch = make_batch(rows=2)
    seen = []
    for _ in range(3):
        seen.append(worker.get_lr())
        worker.forward_backward(batch, grpo_advantages(batch), batch.rollout_logprobs)
        worker.optim_step()
    assert seen == pytest.approx([0.0, 5e-4, 1e-3])  # linear warm-up over 2 steps, then constant
    with pytest.raises(ValueError, match="optimizer.scheduler='cosine'.*num_training_steps=None"):
        _policy(worker_config("trainer.policy.optimizer.scheduler=cosine"), single_rank_group)
    cosine = _policy(
        worker_config("trainer.policy.optimizer.scheduler=cosine"), single_rank_group, num_training_steps=4
    )
    assert cosine.get_lr() == pytest.approx(1e-3)


def test_unsupported_settings_name_the_field(single_rank_group, worker_config):
    with pytest.raises(NotImplementedError, match="trainer.ref.model.lora.rank=4: LoRA is supported for the policy"):
        _policy(worker_config("trainer.ref.model.lora.rank=4"), single_rank_group, RefWorker, role="ref")
    with pytest.raises(ValueError, match="trainer.policy.sequence_parallel_size=2 must divide the policy's 1 workers"):
        _policy(worker_config("trainer.policy.sequence_parallel_size=2"), single_rank_group)
    with pytest.raises(ValueError, match="sequence_parallel_size=2 needs packed micro-batches"):
        _policy(
            worker_config("trainer.policy.sequence_parallel_size=2", "trainer.remove_microbatch_padding=false"),
            single_rank_group,
        )
    with pytest.raises(ValueError, match="role must be one of"):
        PolicyWorker("actor", 0, 1, "127.0.0.1", 0, worker_config())


def test_gradient_checkpointing_keeps_the_gradient(
    single_rank_group, worker_config, make_batch, grpo_advantages, full_gradients
):
    batch = make_batch(rows=4, seed=3)
    gradients = []
    for checkpointing in ("false", "true"):
        worker = _policy(worker_config(f"trainer.policy.gradient_checkpointing={checkpointing}"), single_rank_group)
        assert worker.model.is_gradient_checkpointing == (checkpointing == "true")
        worker.forward_backward(batch, grpo_advantages(batch), batch.rollout_logprobs)
        gradients.append(full_gradients(worker))
    # recomputing activations in backward repeats the same float32 ops: the gradient is unchanged
    assert all(torch.allclose(gradients[1][name], grad, rtol=1e-5, atol=1e-8) for name, grad in gradients[0].items())


@pytest.mark.parametrize("packing", ["false", "true"])
def test_shared_prompt_forward_keeps_logprobs_and_gradient(
    single_rank_group, worker_config, make_grouped_batch, grpo_advantages, full_gradients, packing
):
    batch = make_grouped_batch(groups=3, samples=4, seed=5)
    logprobs, gradients = [], []
    pack = f"trainer.remove_microbatch_padding={packing}"
    for share in ("false", "true"):
        worker = _policy(worker_config(f"trainer.share_prompt_forward={share}", pack), single_rank_group)
        assert worker.shares_prompt_forward == (share == "true")
        logprobs.append(worker.forward(batch))
        worker.forward_backward(batch, grpo_advantages(batch), None, on_policy=True)
        gradients.append(full_gradients(worker))
    # the shared path attends over the same keys with other matmul shapes: only float summation order differs
    assert torch.allclose(logprobs[1], logprobs[0], atol=1e-4, rtol=0)
    for name, grad in gradients[0].items():
        assert (gradients[1][name] - grad).abs().max() <= 1e-4 * grad.abs().max() + 1e-8, name
    checkpointed = _policy(
        worker_config("trainer.share_prompt_forward=true", "trainer.policy.gradient_checkpointing=true", pack),
        single_rank_group,
    )
    # Padded, checkpointing turns the key/value cache off; packed, the prompt is shared without one.
    assert checkpointed.shares_prompt_forward == (packing == "true")


def test_bf16_mixed_precision_trains_with_float32_master_weights(
    single_rank_group, worker_config, make_batch, grpo_advantages
):
    batch = make_batch(rows=4, seed=3)
    fp32 = _policy(worker_config(), single_rank_group).forward(batch)
    worker = _policy(worker_config("trainer.policy.fsdp.mixed_precision.param_dtype=bfloat16"), single_rank_group)
    bf16 = worker.forward(batch)
    assert torch.allclose(bf16, fp32, atol=0.1) and not torch.equal(bf16, fp32)  # bf16 compute, close to fp32
    metrics = worker.forward_backward(batch, grpo_advantages(batch), bf16)
    assert torch.isfinite(torch.tensor(metrics["policy/loss"])) and worker.optim_step() > 0
    assert all(tensor.dtype == torch.float32 for _, tensor in worker.get_weights())


def test_each_role_builds_from_its_own_section(single_rank_group, worker_config):
    config = worker_config(
        "trainer.policy.optimizer.lr=0.5",
        "trainer.policy.optimizer.adam_betas=[0.8,0.95]",
        "trainer.policy.optimizer.weight_decay=0.3",
        "trainer.critic.optimizer.lr=0.25",
        "trainer.policy.gradient_checkpointing=true",
        "trainer.policy.fsdp.reshard_after_forward=false",
        "trainer.ref.fsdp.mixed_precision.reduce_dtype=bfloat16",
        "trainer.ref.fsdp.reshard_after_forward=true",
    )
    policy = _policy(config, single_rank_group)
    group = policy.strategy.optimizer.param_groups[0]
    assert (policy.get_lr(), group["betas"], group["weight_decay"]) == (0.5, (0.8, 0.95), 0.3)
    assert policy.strategy.gradient_checkpointing and policy.model.is_gradient_checkpointing
    assert (
        policy.strategy.fsdp.reshard_after_forward is False
        and policy.strategy.fsdp.mixed_precision.reduce_dtype == "float32"
    )
    ref = _policy(config, single_rank_group, cls=RefWorker, role="ref")
    assert ref.strategy.optimizer is None and ref.strategy.fsdp.reshard_after_forward is True
    assert ref.strategy._shard_kwargs()["mp_policy"].reduce_dtype == torch.bfloat16


def test_forward_backward_step_is_forward_backward_then_optim_step(
    single_rank_group, worker_config, make_batch, grpo_advantages
):
    batch = make_batch(rows=6, seed=7)
    advantages = grpo_advantages(batch)
    separate = _policy(worker_config(), single_rank_group)
    metrics = separate.forward_backward(batch, advantages, batch.rollout_logprobs)
    grad_norm = separate.optim_step()
    combined = _policy(worker_config(), single_rank_group)
    step_metrics = combined.forward_backward_step(batch, advantages=advantages, old_logprobs=batch.rollout_logprobs)
    assert step_metrics.pop("policy/grad_norm") == pytest.approx(grad_norm) and grad_norm > 0
    assert step_metrics == pytest.approx(metrics)
    for (name, expected), (_, got) in zip(separate.get_weights(), combined.get_weights(), strict=True):
        assert torch.equal(got, expected), name  # the same ops in the same order: bit-identical


def test_train_mini_batches_is_the_update_of_separate_calls_in_one(
    single_rank_group, worker_config, make_batch, grpo_advantages
):
    """One `train_mini_batches(old_logprobs_first=True)` call does what the trainer would do with separate calls: a
    forward over the later mini-batches, the first mini-batch's first pass on-policy (keeping its log-probs), then
    every pass against those old log-probs: the same old log-probs, metrics and weights, bit for bit."""
    batch = make_batch(rows=9, seed=3)
    advantages = grpo_advantages(batch)
    shards = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    separate = _policy(worker_config(), single_rank_group)
    eval_forward = separate.forward(batch.select(shards[0]))  # before any optimizer step: the old policy's
    olds = [torch.zeros(3, batch.response_width)] + list(separate.forward(batch.select(shards[1] + shards[2])).split(3))
    expected = [[], [], []]
    for epoch in range(2):
        for index, rows in enumerate(shards):
            kwargs = {"advantages": advantages[rows]}
            if epoch == 0 and index == 0:
                kwargs.update(old_logprobs=None, on_policy=True, logprobs_out=olds[0])
            else:
                kwargs.update(old_logprobs=olds[index])
            expected[index].append(separate.forward_backward_step(batch.select(rows), **kwargs))
    # the kept log-probs are the old policy's: what a forward of its own gives, up to float summation order (the
    # train pass runs with gradients and another batch shape; float32 log-softmax over 128 tokens: ~1e-6)
    torch.testing.assert_close(olds[0], eval_forward, rtol=0, atol=1e-5)
    assert bool((olds[0] != 0).any())

    combined = _policy(worker_config(), single_rank_group)
    mini_batches = [(batch.select(rows), {"advantages": advantages[rows], "old_logprobs": None}) for rows in shards]
    results = combined.train_mini_batches(mini_batches, epochs=2, old_logprobs_first=True)
    for result, old, steps in zip(results, olds, expected, strict=True):
        assert torch.equal(result.old_logprobs, old)
        assert len(result.steps) == 2
        for got, want in zip(result.steps, steps):
            assert got == pytest.approx(want)
    first_pass = results[0].steps[0]  # on-policy: the ratio is exactly 1
    assert first_pass["policy/ratio_min"] == first_pass["policy/ratio_max"] == 1.0
    assert results[1].steps[0]["policy/ratio_max"] != 1.0 or results[2].steps[0]["policy/ratio_max"] != 1.0
    for (name, want), (_, got) in zip(separate.get_weights(), combined.get_weights(), strict=True):
        assert torch.equal(got, want), name
    with pytest.raises(ValueError, match="old_logprobs_first=True computes old_logprobs"):
        combined.train_mini_batches(
            [(batch, {"advantages": advantages, "old_logprobs": olds[0]})], old_logprobs_first=True
        )


def test_async_modes_correct_stale_data_by_default(
    single_rank_group, worker_config, make_batch, grpo_advantages, full_gradients
):
    """`tis_ratio_type: auto` (the default) is token-level truncated importance sampling in the async modes: the
    batch's rollout log-probs are not the model's (as with stale async data), so the default async update is the
    explicitly corrected one and differs from the uncorrected one."""
    batch = make_batch(rows=6, seed=3)
    advantages = grpo_advantages(batch)

    def gradients(*overrides):
        worker = _policy(worker_config("trainer.micro_train_batch_size_per_gpu=4", *overrides), single_rank_group)
        worker.forward_backward(batch, advantages, None, on_policy=True)
        return full_gradients(worker)

    by_default = gradients("trainer.mode=fully_async")  # a worker config: validation (placement) is not run
    corrected = gradients("trainer.algorithm.off_policy_correction.tis_ratio_type=token")
    uncorrected = gradients("trainer.mode=fully_async", "trainer.algorithm.off_policy_correction.tis_ratio_type=null")
    for name, grad in corrected.items():
        assert torch.allclose(by_default[name], grad, rtol=1e-5, atol=1e-8), name
    assert any(not torch.allclose(uncorrected[name], grad, rtol=1e-3, atol=1e-6) for name, grad in corrected.items())


def test_a_cuda_worker_empties_its_caching_allocator_and_a_cpu_worker_has_nothing_to_do(tiny_model_dir, monkeypatch):
    """`BaseWorker.release_memory`: CUDA cannot run here, so the allocator calls are stand-ins that record them."""
    from skyrl_train.config import SkyRLConfig
    from skyrl_train.workers.policy_worker import PolicyWorker

    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 7)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 5)
    cfg = SkyRLConfig.from_cli_overrides(["trainer.device=cpu", f"trainer.policy.model.path={tiny_model_dir}"])
    worker = PolicyWorker("policy", 0, 1, None, None, cfg)
    assert worker.release_memory() == {"reserved_bytes": 0, "allocated_bytes": 0} and calls == []
    worker.device = torch.device("cuda", 0)
    assert worker.release_memory() == {"reserved_bytes": 7, "allocated_bytes": 5} and calls == ["empty_cache"]
