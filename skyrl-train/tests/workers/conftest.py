"""Shared fixtures of the worker tests: a tiny model folder on disk, batches of fake rollouts, worker configs."""

import random

import pytest
import torch

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.types import Trajectory
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.training_batch import TrainingBatch


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A size-1 tiny Qwen2 model (about 0.1 M parameters) with the char tokenizer, saved as a HF folder."""
    directory = tmp_path_factory.mktemp("tiny_model")
    build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained(directory)
    save_tokenizer(build_char_tokenizer(), directory)
    return str(directory)


def _trajectory(rng: random.Random, uid: str) -> Trajectory:
    prompt = [rng.randrange(5, 100) for _ in range(rng.randint(2, 7))]
    response = [rng.randrange(5, 100) for _ in range(rng.randint(1, 6))]
    loss_mask = [1] * len(response)
    if len(response) > 2:
        loss_mask[1] = 0  # an observation token inside the response
    return Trajectory(
        uid=uid,
        env_class="test",
        prompt_token_ids=prompt,
        response_ids=response,
        loss_mask=loss_mask,
        token_rewards=[0.0] * (len(response) - 1) + [float(rng.random() > 0.5)],
        rollout_logprobs=[-4.5 + 0.1 * i for i in range(len(response))],
        stop_reason="stop",
        num_turns=1,
        weight_version=0,
    )


@pytest.fixture
def make_batch():
    """`make_batch(rows, seed)`: a TrainingBatch of random rollouts (pad id 0), two samples per uid."""

    def build(rows: int = 6, seed: int = 0) -> TrainingBatch:
        rng = random.Random(seed)
        return TrainingBatch.from_trajectories([_trajectory(rng, str(i // 2)) for i in range(rows)], pad_token_id=0)

    return build


@pytest.fixture
def make_grouped_batch():
    """`make_grouped_batch(groups, samples, seed)`: GRPO-shaped rollouts, `samples` rows repeating each prompt."""

    def build(groups: int = 3, samples: int = 4, seed: int = 0) -> TrainingBatch:
        rng = random.Random(seed)
        rows = []
        for group in range(groups):
            prompt = [rng.randrange(5, 100) for _ in range(rng.randint(2, 7))]
            for _ in range(samples):
                row = _trajectory(rng, str(group))
                row.prompt_token_ids = list(prompt)
                rows.append(row)
        return TrainingBatch.from_trajectories(rows, pad_token_id=0)

    return build


@pytest.fixture
def grpo_advantages():
    """`grpo_advantages(batch, seed)`: per-row advantages of mixed sign broadcast over the response, 0 on padding."""

    def build(batch: TrainingBatch, seed: int = 0) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        per_row = torch.randn(len(batch), 1, generator=generator)
        return per_row * batch.response_mask.float()

    return build


@pytest.fixture(scope="session")
def worker_config(tiny_model_dir):
    """`worker_config(*overrides)`: a CPU, float32 run config for the tiny model as a plain dict (session-scoped, so
    module fixtures that start worker groups can build theirs from it too)."""

    def build(*overrides: str) -> dict:
        base = [
            "trainer.device=cpu",
            f"trainer.policy.model.path={tiny_model_dir}",
            f"trainer.critic.model.path={tiny_model_dir}",
            "trainer.policy.fsdp.mixed_precision.param_dtype=float32",
            "trainer.critic.fsdp.mixed_precision.param_dtype=float32",
            "trainer.ref.fsdp.mixed_precision.param_dtype=float32",
            "trainer.policy.gradient_checkpointing=false",
            "trainer.critic.gradient_checkpointing=false",
            "trainer.policy.optimizer.lr=1e-3",
            "trainer.critic.optimizer.lr=1e-3",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.micro_train_batch_size_per_gpu=8",
            "trainer.micro_forward_batch_size_per_gpu=8",
        ]
        return SkyRLConfig.from_cli_overrides([*base, *overrides], validate=False).to_dict()

    return build


@pytest.fixture
def parameter_values():
    """`parameter_values(worker)`: full (unsharded) parameter values of an in-process worker."""
    return lambda worker: {name: tensor.clone() for name, tensor in worker.get_weights()}


@pytest.fixture
def full_gradients():
    """`full_gradients(worker)`: full (unsharded) gradients of an in-process worker's parameters."""

    def gather(worker) -> dict:
        return {n: p.grad.full_tensor().clone() for n, p in worker.model.named_parameters() if p.grad is not None}

    return gather
