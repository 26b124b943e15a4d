"""CriticWorker in-process (world size 1): value-head model, forward values, clipped value-loss updates."""

import pytest
import torch
from torch.distributed.tensor import DTensor

from skyrl_train.algorithms.masked import zero_masked
from skyrl_train.workers import CriticWorker
from skyrl_train.workers.critic_worker import load_value_model


def _critic(config, group):
    worker = CriticWorker("critic", 0, 1, *group, config, num_threads=1)
    worker.init_model()
    return worker


def test_values_come_from_the_head_at_the_position_before_each_token(
    single_rank_group, worker_config, tiny_model_dir, make_batch
):
    batch = make_batch(rows=3)
    worker = _critic(worker_config("trainer.micro_forward_batch_size_per_gpu=2", "trainer.seed=5"), single_rank_group)
    values = worker.forward(batch)
    torch.manual_seed(5)  # the worker seeds with trainer.seed before building the (random) value head
    model = load_value_model(tiny_model_dir).eval()
    with torch.no_grad():
        scores = model(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids).logits
    start = batch.prompt_width - 1
    expected = zero_masked(scores[:, start : start + batch.response_width, 0], batch.response_mask)
    assert values.shape == (3, batch.response_width)
    assert torch.allclose(values, expected, atol=1e-5)


def test_value_loss_updates_move_values_toward_returns(single_rank_group, worker_config, make_batch):
    batch = make_batch(rows=4, seed=3)
    config = worker_config("trainer.algorithm.value_clip=10.0", "trainer.micro_train_batch_size_per_gpu=2")
    worker = _critic(config, single_rank_group)
    returns = torch.full((4, batch.response_width), 1.0)
    mask = batch.loss_mask

    def error(values):
        return float((((values - returns) ** 2) * mask).sum() / mask.sum())

    values = worker.forward(batch)
    first_error = error(values)
    for _ in range(5):
        metrics = worker.forward_backward(batch, returns=returns, old_values=values)
        # token_mean of 0.5 * (V - R)^2 over the valid tokens (value_clip=10 never binds), from the values that
        # forward() reported for the unchanged model
        assert metrics["critic/value_loss"] == pytest.approx(0.5 * error(values), rel=1e-4)
        grad_norm = worker.optim_step()
        values = worker.forward(batch)
    assert {"critic/value_loss", "critic/value_clip_frac", "critic/values_mean", "critic/lr"} <= set(metrics)
    assert metrics["critic/value_clip_frac"] == 0.0
    assert torch.isfinite(torch.tensor(grad_norm)) and grad_norm > 0
    assert error(values) < 0.5 * first_error


def test_the_critic_builds_from_its_own_section(single_rank_group, worker_config):
    config = worker_config(
        "trainer.policy.optimizer.lr=0.5",
        "trainer.critic.optimizer.lr=0.25",
        "trainer.critic.optimizer.adam_betas=[0.7,0.9]",
        "trainer.critic.optimizer.weight_decay=0.2",
        "trainer.critic.optimizer.num_warmup_steps=4",
        "trainer.critic.gradient_checkpointing=true",
        "trainer.critic.fsdp.reshard_after_forward=false",
    )
    worker = _critic(config, single_rank_group)
    group = worker.strategy.optimizer.param_groups[0]
    assert (group["initial_lr"], group["betas"], group["weight_decay"]) == (0.25, (0.7, 0.9), 0.2)
    assert worker.get_lr() == 0.0  # warm-up from 0 over the critic's 4 steps
    assert worker.strategy.gradient_checkpointing and worker.strategy.fsdp.reshard_after_forward is False
    constant = _critic(
        worker_config(
            "trainer.critic.optimizer.lr=0.25",
            "trainer.critic.optimizer.num_warmup_steps=4",
            "trainer.critic.optimizer.scheduler=constant",
        ),
        single_rank_group,
    )
    assert constant.get_lr() == 0.25  # the critic's schedule name: `constant` has no warm-up


CRITIC_LORA = (
    "trainer.critic.model.lora.rank=4",
    "trainer.critic.model.lora.alpha=8",
    "trainer.critic.optimizer.lr=1e-2",
    "trainer.algorithm.value_clip=10.0",
)


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A parameter's full value, sharded (DTensor) or gathered (kept after a forward when not resharding)."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def test_critic_lora_trains_the_adapters_and_the_value_head_only(single_rank_group, worker_config, make_batch):
    batch = make_batch(rows=4, seed=3)
    worker = _critic(worker_config(*CRITIC_LORA), single_rank_group)
    trainable = {name for name, param in worker.model.named_parameters() if param.requires_grad}
    adapters = {name for name in trainable if ".lora_A." in name or ".lora_B." in name}
    assert adapters and trainable - adapters and all("score" in name for name in trainable - adapters)
    before = {name: _whole(param.detach()).clone() for name, param in worker.model.named_parameters()}
    returns = torch.full((4, batch.response_width), 1.0)
    mask = batch.loss_mask
    values = worker.forward(batch)
    first_error = float((((values - returns) ** 2) * mask).sum() / mask.sum())
    for _ in range(5):
        worker.forward_backward(batch, returns=returns, old_values=values)
        worker.optim_step()
        values = worker.forward(batch)
    after = dict(worker.model.named_parameters())
    changed = {name for name, tensor in before.items() if not torch.equal(tensor, _whole(after[name].detach()))}
    assert changed and changed <= trainable and changed & adapters  # the frozen backbone did not move
    assert float((((values - returns) ** 2) * mask).sum() / mask.sum()) < 0.5 * first_error


def test_critic_lora_checkpoint_resumes_exactly(single_rank_group, worker_config, make_batch, tmp_path):
    batch = make_batch(rows=4, seed=6)
    returns = torch.full((4, batch.response_width), 0.5)

    def train(worker, steps):
        for _ in range(steps):
            worker.forward_backward(batch, returns=returns, old_values=worker.forward(batch))
            worker.optim_step()

    uninterrupted = _critic(worker_config(*CRITIC_LORA), single_rank_group)
    train(uninterrupted, 2)
    uninterrupted.save_checkpoint(str(tmp_path / "ckpt"))
    train(uninterrupted, 2)
    resumed = _critic(worker_config(*CRITIC_LORA), single_rank_group)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    train(resumed, 2)
    assert torch.allclose(resumed.forward(batch), uninterrupted.forward(batch), atol=1e-6)


def test_critic_lora_keys_reach_the_adapters(single_rank_group, worker_config):
    worker = _critic(
        worker_config(
            *CRITIC_LORA,
            "trainer.critic.model.lora.dropout=0.25",
            "trainer.critic.model.lora.target_modules=[q_proj,v_proj,down_proj]",
            "trainer.critic.model.lora.exclude_modules=[down_proj]",
        ),
        single_rank_group,
    )
    trainable = {name for name, param in worker.model.named_parameters() if param.requires_grad}
    adapted = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable if ".lora_" in name}
    assert adapted == {"q_proj", "v_proj"}  # down_proj is targeted but excluded
    config = worker.model.peft_config["default"]
    assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 8, 0.25)
    dropouts = [m.p for name, m in worker.model.named_modules() if name.endswith("lora_dropout.default")]
    assert dropouts and set(dropouts) == {0.25}
