"""`trainer.remove_microbatch_padding` in the workers (in-process, world size 1): the policy, ref and critic run
their micro-batches as one packed sequence, with the padded path's log-probs, values, losses and gradients."""

import pytest
import torch
from transformers import Qwen2ForCausalLM

from skyrl_train.models.packing import bucketed_length
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker

TOLERANCE = 1e-5
"""fp32 on the tiny model: packed and padded differ only in summation order (see tests/models/test_packing.py)."""


def _worker(cls, role, config, group):
    worker = cls(role, 0, 1, *group, config, num_threads=1)
    worker.init_model()
    return worker


def _record_input_shapes(worker) -> list[tuple[int, ...]]:
    """The `input_ids` shape of every model call the worker makes from now on."""
    shapes = []
    worker.model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    return shapes


def _close_gradients(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys() and expected
    for name, grad in expected.items():
        assert (got[name] - grad).abs().max() <= TOLERANCE * grad.abs().max() + 1e-12, name


def test_the_policy_runs_packed_sequences_with_the_padded_logprobs_loss_and_gradients(
    single_rank_group, worker_config, make_grouped_batch, grpo_advantages, full_gradients
):
    batch = make_grouped_batch(groups=3, samples=4, seed=11)
    advantages = grpo_advantages(batch)
    old = batch.rollout_logprobs + 0.05 * batch.response_mask  # ratios != 1 so clipping is exercised
    results = {}
    for packing in ("false", "true"):
        config = worker_config(
            f"trainer.remove_microbatch_padding={packing}", "trainer.micro_train_batch_size_per_gpu=6"
        )
        worker = _worker(PolicyWorker, "policy", config, single_rank_group)
        shapes = _record_input_shapes(worker)
        logprobs = worker.forward(batch)
        metrics = worker.forward_backward(batch, advantages, old)
        results[packing] = (logprobs, metrics, full_gradients(worker), shapes)
    padded, packed = results["false"], results["true"]
    # Padded: [rows, columns] calls (each distinct prompt once, then the rows' responses); packed: one sequence per
    # micro-batch, so the key changed the path. The forward's micro-batches of 8 and 4 rows and the update's two of 6.
    assert max(rows for rows, _ in padded[3]) > 1
    assert len(packed[3]) == 4 and all(rows == 1 for rows, _ in packed[3])
    assert sum(tokens for _, tokens in packed[3]) < sum(rows * columns for rows, columns in padded[3])
    torch.testing.assert_close(packed[0], padded[0], atol=TOLERANCE, rtol=0)
    assert packed[1]["policy/loss"] == pytest.approx(padded[1]["policy/loss"], rel=1e-5)
    assert packed[1]["policy/entropy"] == pytest.approx(padded[1]["policy/entropy"], rel=1e-5)
    _close_gradients(packed[2], padded[2])


def test_the_ref_and_the_critic_pack_too(single_rank_group, worker_config, make_batch, full_gradients):
    batch = make_batch(rows=5, seed=12)
    returns = torch.linspace(-1, 1, batch.response_width).expand(len(batch), -1).contiguous()
    results = {}
    for packing in ("false", "true"):
        config = worker_config(f"trainer.remove_microbatch_padding={packing}", "trainer.seed=3")
        ref = _worker(RefWorker, "ref", config, single_rank_group)
        ref_shapes = _record_input_shapes(ref)
        critic = _worker(CriticWorker, "critic", config, single_rank_group)
        critic_shapes = _record_input_shapes(critic)
        values = critic.forward(batch)
        metrics = critic.forward_backward(batch, returns=returns, old_values=values)
        results[packing] = (ref.forward(batch), values, metrics, full_gradients(critic), ref_shapes, critic_shapes)
    padded, packed = results["false"], results["true"]
    assert all(shape[0] == 1 for shape in packed[4] + packed[5]) and packed[4] and packed[5]
    assert all(shape[0] == len(batch) for shape in padded[4] + padded[5])
    torch.testing.assert_close(packed[0], padded[0], atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(packed[1], padded[1], atol=TOLERANCE, rtol=0)
    assert packed[2]["critic/value_loss"] == pytest.approx(padded[2]["critic/value_loss"], rel=1e-5)
    _close_gradients(packed[3], padded[3])


def test_bfloat16_on_cpu_packs_to_bucketed_lengths_and_float32_keeps_its_own(
    single_rank_group, worker_config, make_grouped_batch, grpo_advantages
):
    """In bfloat16 on CPU every packed forward (old log-probs, the update) runs at a `bucketed_length`, so oneDNN
    sees repeating matmul sizes; float32 packs to the rows' own length (the same batch gives lengths off the
    buckets there, so the check is not vacuous)."""
    batch = make_grouped_batch(groups=8, samples=4, seed=5)
    advantages = grpo_advantages(batch)
    lengths = {}
    for dtype in ("float32", "bfloat16"):
        config = worker_config(
            f"trainer.policy.fsdp.mixed_precision.param_dtype={dtype}",
            "trainer.micro_forward_batch_size_per_gpu=32",
            "trainer.micro_train_batch_size_per_gpu=16",
            "trainer.share_prompt_forward=false",  # every row packs its prompt: lengths past 128
        )
        worker = _worker(PolicyWorker, "policy", config, single_rank_group)
        assert worker.buckets_packed_lengths is (dtype == "bfloat16")
        shapes = _record_input_shapes(worker)
        worker.forward(batch)
        worker.forward_backward(batch, advantages, None, on_policy=True)
        lengths[dtype] = [tokens for _, tokens in shapes]
    assert len(lengths["bfloat16"]) == len(lengths["float32"]) == 3  # forward: 1 micro-batch of 32, update: 2 of 16
    assert any(bucketed_length(tokens) != tokens for tokens in lengths["float32"])
    assert lengths["bfloat16"] == [bucketed_length(tokens) for tokens in lengths["float32"]]


def test_a_model_that_cannot_pack_runs_padded_on_auto_and_fails_on_true(
    single_rank_group, worker_config, tmp_path, tiny_hf_config
):
    config = tiny_hf_config("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=0)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path)
    path = f"trainer.policy.model.path={tmp_path}"
    with pytest.raises(ValueError, match=r"remove_microbatch_padding=true cannot pack the policy model: .*sliding"):
        _worker(
            PolicyWorker, "policy", worker_config(path, "trainer.remove_microbatch_padding=true"), single_rank_group
        )
    assert not _worker(PolicyWorker, "policy", worker_config(path), single_rank_group).packs_rows  # auto
    assert _worker(PolicyWorker, "policy", worker_config(), single_rank_group).packs_rows  # auto, the tiny model


def test_megatron_workers_pack_on_auto_and_true_and_run_padded_on_false(single_rank_group, worker_config):
    """The Megatron model packs whatever the HF model's attention (it is rebuilt with packable attention), so only
    `false` runs padded; deciding touches no CUDA (the strategy is built later)."""
    for setting, expected in (("auto", True), ("true", True), ("false", False)):
        cfg = worker_config("trainer.strategy=megatron", f"trainer.remove_microbatch_padding={setting}")
        worker = PolicyWorker("policy", 0, 1, *single_rank_group, cfg, num_threads=1)
        assert worker._decide_packing(worker.load_model(worker.cfg.trainer.policy.model.path)) is expected, setting
