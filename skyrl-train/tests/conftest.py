"""Test-wide settings and fixtures for skyrl-train: no hub access, one torch thread per process on the 2-core CI
machine, the session's local Ray cluster and an in-process single-rank process group."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)

import pytest  # noqa: E402


def _build_tiny_reward_model(directory, tokenizer=None, seed: int = 0, scale: float = 0.3) -> str:
    """Save a size-1 tiny `Qwen2ForSequenceClassification` (one label) with `tokenizer` (default: the char tokenizer)
    in `directory`. Weights are drawn with std `scale` so different texts get clearly different scores."""
    from transformers import Qwen2ForSequenceClassification

    from skyrl_train.models.tiny import TinyModelSpec, tiny_model_config
    from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer

    config = tiny_model_config(TinyModelSpec(size=1))
    config.num_labels = 1
    generator = torch.Generator().manual_seed(seed)
    model = Qwen2ForSequenceClassification(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, scale, generator=generator)
    model.save_pretrained(directory)
    save_tokenizer(tokenizer if tokenizer is not None else build_char_tokenizer(), directory)
    return str(directory)


@pytest.fixture(scope="session")
def build_reward_model():
    """`build_reward_model(directory, tokenizer=None, seed=0, scale=0.3) -> path`: save a tiny reward model."""
    return _build_tiny_reward_model


@pytest.fixture(scope="session")
def tiny_reward_model_dir(tmp_path_factory):
    """A tiny reward model (Qwen2 sequence classifier, char tokenizer with its chat template) saved as a HF folder."""
    return _build_tiny_reward_model(tmp_path_factory.mktemp("tiny_reward_model"))


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster (4 CPUs) shared by every test of the session that asks for it; left running if the
    session found Ray already up."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def single_rank_group():
    """A world-size-1 gloo process group in this process, so workers can run in-process (no Ray)."""
    import torch.distributed as dist

    from skyrl_train.workers.distributed import free_port

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield ("127.0.0.1", 0)
    if created:
        dist.destroy_process_group()
