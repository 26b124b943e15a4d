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


@pytest.fixture
def make_trajectory():
    """`make_trajectory(uid, reward, length=2, **fields)`: a single-turn trajectory of `length` generated tokens,
    all in the loss, with `reward` on the last one; `fields` set any other `Trajectory` field (e.g. `env_error`)."""
    from skyrl_train.generators.types import Trajectory

    def make(uid: str, reward: float, length: int = 2, **fields) -> Trajectory:
        settings = dict(
            uid=uid,
            env_class="t",
            prompt_token_ids=[1],
            response_ids=[5] * length,
            loss_mask=[1] * length,
            token_rewards=[0.0] * (length - 1) + [reward],
            rollout_logprobs=None,
            stop_reason="stop",
            num_turns=1,
            weight_version=0,
        )
        return Trajectory(**{**settings, **fields})

    return make


def _varied_tiny_model(seed: int = 0):
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

    model = build_tiny_model(TinyModelSpec(size=2), seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model


def _save_varied_tiny_model(directory, seed: int = 0) -> str:
    from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer

    _varied_tiny_model(seed).save_pretrained(directory)
    save_tokenizer(build_char_tokenizer(), directory)
    return str(directory)


@pytest.fixture(scope="session")
def varied_tiny_model():
    """`varied_tiny_model(seed)`: a size-2 tiny model with N(0, 0.5) weights drawn from `seed`. Default-initialised
    tiny models all repeat one token greedily, so tests that need outputs (or weights) to differ use this one."""
    return _varied_tiny_model


@pytest.fixture(scope="session")
def save_varied_tiny_model():
    """`save_varied_tiny_model(directory, seed)`: that model and the char tokenizer saved in `directory`; its path."""
    return _save_varied_tiny_model


@pytest.fixture(scope="module")
def tokenizer():
    """The char tokenizer (`build_char_tokenizer`), one per test module."""
    from skyrl_train.models.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture(scope="session")
def spread_tiny_model_dir(tmp_path_factory) -> str:
    """A size-1 tiny model (with the char tokenizer) whose weights are spread wide enough, N(0, 0.3), that it samples
    varied answers (some of them right) instead of repeating one token."""
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
    from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer

    path = tmp_path_factory.mktemp("spread_tiny_model")
    model = build_tiny_model(TinyModelSpec(size=1), seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3, generator=generator)
    model.save_pretrained(path)
    save_tokenizer(build_char_tokenizer(), path)
    return str(path)


def _adapted_tiny_model(seed: int = 1, scale: float = 0.1):
    from skyrl_train.models.lora import LoRASettings, apply_lora
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

    model = apply_lora(build_tiny_model(TinyModelSpec(size=2), seed=0), LoRASettings(rank=4, alpha=8))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    return model.eval()


@pytest.fixture(scope="session")
def adapted_tiny_model():
    """`adapted_tiny_model(seed=1, scale=0.1)`: the size-2 tiny model (seed 0) with a rank-4, alpha-8 LoRA adapter
    whose B matrices are N(0, scale) drawn from `seed` (a fresh adapter's B is zero and changes nothing); in eval."""
    return _adapted_tiny_model


def _tiny_hf_config(model_type: str, **overrides):
    from transformers import LlamaConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig

    shared = dict(num_hidden_layers=2, num_key_value_heads=2, tie_word_embeddings=False)
    moe = dict(shared, vocab_size=64, hidden_size=32, num_attention_heads=4, max_position_embeddings=64)
    # an odd vocabulary exercises the vocabulary padding for tp=2
    dense = dict(
        shared, vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=8, max_position_embeddings=128
    )
    settings = {
        "llama": dense,
        "qwen2": dense,
        "qwen3": dict(dense, head_dim=8),  # q/k norms over each head
        "qwen3_moe": dict(
            moe, intermediate_size=48, moe_intermediate_size=16, head_dim=8, num_experts=4, num_experts_per_tok=2
        ),
        "qwen2_moe": dict(
            moe,
            intermediate_size=48,
            moe_intermediate_size=16,
            num_experts=4,
            num_experts_per_tok=2,
            shared_expert_intermediate_size=24,
        ),
        "mixtral": dict(moe, intermediate_size=16, num_local_experts=4, num_experts_per_tok=2),
    }[model_type]
    classes = {
        "llama": LlamaConfig,
        "qwen2": Qwen2Config,
        "qwen3": Qwen3Config,
        "qwen3_moe": Qwen3MoeConfig,
        "qwen2_moe": Qwen2MoeConfig,
        "mixtral": MixtralConfig,
    }
    return classes[model_type](**dict(settings, **overrides))


@pytest.fixture
def tiny_hf_config():
    """`tiny_hf_config(model_type, **overrides)`: a 2-layer HF config of `llama`, `qwen2`, `qwen3` (dense, the same
    sizes), `qwen3_moe`, `qwen2_moe` or `mixtral` (4 experts, top-2), for tests that need an architecture other than the
    tiny model's: small enough that its weights convert to Megatron and back in milliseconds."""
    return _tiny_hf_config


@pytest.fixture(scope="session")
def build_reward_model():
    """`build_reward_model(directory, tokenizer=None, seed=0, scale=0.3) -> path`: save a tiny reward model."""
    return _build_tiny_reward_model


@pytest.fixture(scope="session")
def tiny_reward_model_dir(tmp_path_factory):
    """A tiny reward model (Qwen2 sequence classifier, char tokenizer with its chat template) saved as a HF folder."""
    return _build_tiny_reward_model(tmp_path_factory.mktemp("tiny_reward_model"))


def _local_ray(**resources):
    """Start a local Ray cluster with `resources` for as long as the generator runs, unless Ray is already up (then
    it is left as it was)."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(**resources, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster (4 CPUs) shared by every test of the session that asks for it; left running if the
    session found Ray already up."""
    yield from _local_ray(num_cpus=4)


@pytest.fixture
def gpu_ray_cluster():
    """A local Ray cluster seeing this machine's GPUs (4 CPUs), for one GPU test; left running if Ray is already up."""
    import torch

    yield from _local_ray(num_cpus=4, num_gpus=torch.cuda.device_count())


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


class RayGpuSim:
    """Ray's GPU assignment, simulated without Ray or GPUs (what decides which GPU each actor sees).

    Placement-group bundles take whole GPUs of a node in order (`reserve`, a stand-in for `placement._reserve`
    that records the bundles); an actor placed in bundle b with `num_gpus` gets whole GPUs of that bundle (the next
    free ones) or, for a fraction, the first GPU of the bundle with that much capacity left, and sees exactly the GPUs
    it got: Ray sets its `CUDA_VISIBLE_DEVICES` to them. GPU ids are per-node indices, as Ray reports them.
    """

    def __init__(self, gpus_per_node: dict[str, int]) -> None:
        self.free = {node: list(range(count)) for node, count in gpus_per_node.items()}
        self.groups: list[dict] = []

    def reserve(self, role: str, bundles: list[dict], strategy: str, timeout_s: float = 0.0) -> dict:
        """Grant `bundles` (one node for STRICT_PACK, round-robin over nodes for SPREAD), like a placement group."""
        nodes = list(self.free)
        granted = []
        for index, bundle in enumerate(bundles):
            want = int(bundle.get("GPU", 0))
            node = nodes[index % len(nodes)] if strategy == "SPREAD" else nodes[0]
            if len(self.free[node]) < want:
                node = next((n for n in nodes if len(self.free[n]) >= want), None)
                if node is None or strategy == "STRICT_PACK" and any(b["node"] != node for b in granted):
                    raise RuntimeError(f"simulated cluster: no node has {want} free GPU(s) for {role}")
            gpus, self.free[node] = self.free[node][:want], self.free[node][want:]
            granted.append({"node": node, "gpus": {gpu: 1.0 for gpu in gpus}})
        group = {"role": role, "bundles": granted, "shapes": list(bundles)}
        self.groups.append(group)
        return group

    def bundle_nodes(self, group: dict) -> list[str]:
        """The node of each bundle of `group`, in bundle order (a stand-in for `placement.bundle_nodes`)."""
        return [bundle["node"] for bundle in group["bundles"]]

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make `placement.plan_placement` reserve its groups on this simulated cluster."""
        monkeypatch.setattr("skyrl_train.placement._reserve", self.reserve)
        monkeypatch.setattr("skyrl_train.placement.bundle_nodes", self.bundle_nodes)

    def place(self, group: dict, bundle_index: int, num_gpus: float) -> tuple[str, tuple[str, ...]]:
        """`(node, CUDA_VISIBLE_DEVICES entries)` of an actor asking for `num_gpus` in bundle `bundle_index`."""
        bundle = group["bundles"][bundle_index]
        capacity = bundle["gpus"]
        if num_gpus <= 0:
            return bundle["node"], ()
        if num_gpus >= 1:
            whole = [gpu for gpu, left in capacity.items() if left == 1.0][: int(num_gpus)]
            if len(whole) < int(num_gpus):
                raise RuntimeError(f"bundle {bundle_index} has {len(whole)} whole GPU(s) left, {num_gpus} asked")
            for gpu in whole:
                capacity[gpu] = 0.0
            return bundle["node"], tuple(str(gpu) for gpu in whole)
        for gpu, left in capacity.items():
            if left >= num_gpus - 1e-9:
                capacity[gpu] = left - num_gpus
                return bundle["node"], (str(gpu),)
        raise RuntimeError(f"bundle {bundle_index} has no GPU with {num_gpus} left")


@pytest.fixture
def ray_gpu_sim():
    """`ray_gpu_sim({"node0": 4})`: a `RayGpuSim` of a cluster with that many GPUs per node."""
    return RayGpuSim
