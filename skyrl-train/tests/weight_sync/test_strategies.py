"""Weight sync end to end on local Ray: each CPU strategy moves another model's weights into 2 bf16 engine actors.

The engines start from model A; the sender (rank 0 of two "policy" actors sharing a default gloo group, like FSDP
ranks) holds model B in fp32. After a sync the engines must generate exactly what B, loaded in bf16, generates
greedily; serve the new version; pass verify; and a corrupted engine parameter must fail verify by name. The
policy ranks' default group must still work afterwards.
"""

import asyncio
import os

import pytest
import ray
import torch
import torch.distributed as dist

from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.ray_engine import RayEngineProxy, create_engine_actors
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.weight_sync import (
    MixedStrategy,
    WeightSenderHost,
    WeightSyncError,
    connect_auto_weight_sync,
    make_weight_sync_strategy,
)
from skyrl_train.workers.distributed import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENGINE_CFG = {
    "generator": {"inference_engine": {"backend": "hf", "model_dtype": "bfloat16"}},
    "trainer": {"device": "cpu"},
}
GREEDY = SamplingParams(max_tokens=10, temperature=0)
CHUNK_BYTES = 64 * 1024  # the size-2 model is ~1 MB in bf16, so every sync moves many chunks


class PolicyStandIn(WeightSenderHost):
    """One rank of a pretend policy: a default gloo group with its peers, model B, and (rank 0) the sender."""

    def __init__(self, rank: int, world_size: int, master_port: int, model_path: str) -> None:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{master_port}", rank=rank, world_size=world_size)
        self.rank = rank
        self.model = load_causal_lm(model_path, dtype="float32")

    def push_weights(self, version=None):
        """What a policy worker does on sync: hand its full state to the sender."""
        return self.weight_sender.send(self.model.state_dict().items(), version)

    def default_group_sum(self) -> tuple[float, int]:
        """All-reduce rank + 1 over the default group (proves the sync group left it alone)."""
        value = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(value)
        return float(value), dist.get_world_size()


def _prompts(tokenizer):
    rendered = [
        tokenizer.apply_chat_template([{"role": "user", "content": f"{i}*{i + 3}="}], add_generation_prompt=True)
        for i in range(3)
    ]
    return [list(r["input_ids"] if hasattr(r, "keys") else r) for r in rendered]


def _greedy(model_path, prompts):
    engine = HFInferenceEngine(load_causal_lm(model_path, dtype="bfloat16"), load_tokenizer(model_path))
    output = asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=GREEDY)))
    return output.response_ids


@pytest.fixture(scope="module")
def setup(tmp_path_factory, save_varied_tiny_model):
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    root = tmp_path_factory.mktemp("weight_sync")
    path_a, path_b = save_varied_tiny_model(root / "a", seed=0), save_varied_tiny_model(root / "b", seed=1)
    prompts = _prompts(build_char_tokenizer())
    port = free_port()
    policy_class = ray.remote(num_cpus=1)(PolicyStandIn)
    policy = [policy_class.remote(rank, 2, port, path_b) for rank in range(2)]
    engines = create_engine_actors(2, path_a, ENGINE_CFG)
    state_a = {name: tensor.to(torch.bfloat16) for name, tensor in load_causal_lm(path_a).state_dict().items()}
    yield {
        "policy": policy,
        "engines": engines,
        "prompts": prompts,
        "expected_a": _greedy(path_a, prompts),
        "expected_b": _greedy(path_b, prompts),
        "state_a": state_a,
    }
    for actor in policy:
        ray.kill(actor)
    for engine in engines:
        ray.kill(engine.handle)
    if started:
        ray.shutdown()


async def _generations(engines, prompts):
    outputs = await asyncio.gather(
        *(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=GREEDY)) for engine in engines)
    )
    return [(output.response_ids, output.weight_version) for output in outputs]


async def _reset_to_model_a(setup):
    engines = setup["engines"]
    version = max(await asyncio.gather(*(engine.fetch_weight_version() for engine in engines))) + 1
    await asyncio.gather(*(engine.update_weights(list(setup["state_a"].items()), version) for engine in engines))
    assert await _generations(engines, setup["prompts"]) == [(setup["expected_a"], version)] * 2
    return version


def _count_version_requests(monkeypatch):
    """A list that gets an entry each time an engine proxy asks its actor for the served version."""
    asked = []
    fetch = RayEngineProxy.fetch_weight_version

    async def counting(self):
        asked.append(self)
        return await fetch(self)

    monkeypatch.setattr(RayEngineProxy, "fetch_weight_version", counting)
    return asked


def _strategy(name):
    options = {"chunk_bytes": CHUNK_BYTES, "compute_checksums": True, "timeout_s": 60}
    if name == "mixed":  # what `auto` builds when engine 0 runs on another node than the sender
        return MixedStrategy([("shm", [1]), ("broadcast", [0])], **options)
    return make_weight_sync_strategy(name, **options)


@pytest.mark.parametrize("strategy_name", ["broadcast", "shm", "checkpoint", "delta", "mixed"])
async def test_remote_sender_sync_installs_new_model_and_verify_names_corruption(setup, strategy_name, monkeypatch):
    assert setup["expected_a"] != setup["expected_b"]  # otherwise the test could not tell the models apart
    engines, sender = setup["engines"], setup["policy"][0]
    start_version = await _reset_to_model_a(setup)
    strategy = _strategy(strategy_name)
    await strategy.init(sender, engines)
    try:
        result = await sender.push_weights.remote()
        assert result.version == start_version + 1 and result.num_chunks > 1
        assert result.served_versions == [result.version] * 2  # the engines' acknowledgements of the final chunk
        asked = _count_version_requests(monkeypatch)
        assert await strategy.confirm(result.version, result.served_versions) == [result.version] * 2
        assert asked == [] and [engine.weight_version for engine in engines] == [result.version] * 2
        assert await strategy.confirm(result.version) == [result.version] * 2  # without them: each engine is asked
        assert len(asked) == 2
        assert await _generations(engines, setup["prompts"]) == [(setup["expected_b"], result.version)] * 2

        report = await strategy.verify(result.checksums)
        assert report.ok and report.num_checked == 2 * (len(result.checksums) - 1)
        assert report.unreported == ["lm_head.weight"]  # tied to the embedding, which the engine reports

        corrupted = "model.layers.1.mlp.up_proj.weight"
        await engines[1].update_weights([(corrupted, setup["state_a"][corrupted])], result.version)  # A's, not B's
        with pytest.raises(WeightSyncError, match=rf"engine 1: \['{corrupted}'\]"):
            await strategy.verify(result.checksums)

        second = await sender.push_weights.remote()  # a second sync repairs it and bumps the version again
        assert second.version == result.version + 1
        await strategy.confirm(second.version)
        assert (await strategy.verify(second.checksums)).ok
    finally:
        await strategy.close()
    sums = ray.get([actor.default_group_sum.remote() for actor in setup["policy"]])
    assert sums == [(3.0, 2), (3.0, 2)]  # 1 + 2 over the 2-rank default group


async def test_local_sender_sync_from_this_process(setup, monkeypatch, varied_tiny_model):
    engines = setup["engines"]
    start_version = await _reset_to_model_a(setup)
    strategy = make_weight_sync_strategy("broadcast", chunk_bytes=CHUNK_BYTES, compute_checksums=True, timeout_s=60)
    await strategy.init(None, engines)
    try:
        model_b = varied_tiny_model(seed=1)
        asked = _count_version_requests(monkeypatch)
        result = await strategy.sync(model_b.state_dict().items())
        assert asked == []  # confirmed from the engines' acknowledgements
        assert result.version == start_version + 1 and [e.weight_version for e in engines] == [result.version] * 2
        assert await _generations(engines, setup["prompts"]) == [(setup["expected_b"], result.version)] * 2
        with pytest.raises(ValueError, match="version must grow"):
            await strategy.sync(model_b.state_dict().items(), version=result.version)
    finally:
        await strategy.close()


async def test_sync_needs_a_local_sender_and_engine_proxies(setup):
    strategy = make_weight_sync_strategy("checkpoint", timeout_s=60)
    with pytest.raises(TypeError, match=r"engines\[0\]: expected a RayEngineProxy"):
        await strategy.init(None, [object()])
    await strategy.init(setup["policy"][0], setup["engines"])
    try:
        with pytest.raises(WeightSyncError, match="remote sender"):
            await strategy.sync([("model.norm.weight", torch.ones(128))])
    finally:
        await strategy.close()


async def test_auto_on_one_node_takes_the_local_transport_for_every_engine(setup):
    engines, sender = setup["engines"], setup["policy"][0]
    colocated = await connect_auto_weight_sync(sender, engines, colocated=True, device="cpu", timeout_s=60)
    separate = await connect_auto_weight_sync(sender, engines, colocated=False, device="cpu", timeout_s=60)
    try:
        assert (colocated.name, separate.name) == ("shm", "broadcast")
    finally:
        await colocated.close()
        await separate.close()


async def test_shm_sender_keeps_one_block_grows_it_and_unlinks_it_on_close(setup, varied_tiny_model):
    engines = setup["engines"]
    start_version = await _reset_to_model_a(setup)
    strategy = make_weight_sync_strategy("shm", chunk_bytes=CHUNK_BYTES, timeout_s=60)
    await strategy.init(None, engines)
    closed = False
    try:
        state_b = list(varied_tiny_model(seed=1).state_dict().items())
        first = await strategy.sync(state_b)
        sender = strategy._local_sender
        kept = sender.block.name
        assert first.num_chunks > 1 and os.path.exists(f"/dev/shm/{kept}")  # one block served every chunk
        second = await strategy.sync(state_b)
        assert sender.block.name == kept  # and the next sync too
        sender.chunk_bytes = 16 * CHUNK_BYTES  # bigger chunks than the block holds: the sender replaces it
        third = await strategy.sync(state_b)
        assert sender.block.name != kept and not os.path.exists(f"/dev/shm/{kept}")
        assert (first.version, second.version, third.version) == tuple(start_version + k for k in (1, 2, 3))
        # the engines followed the block to its new name and serve B, as the greedy generations show
        assert await _generations(engines, setup["prompts"]) == [(setup["expected_b"], third.version)] * 2
        grown = sender.block.name
        await strategy.close()
        closed = True
        assert not os.path.exists(f"/dev/shm/{grown}")
    finally:
        if not closed:
            await strategy.close()


async def test_the_run_config_builds_the_delta_strategy_with_its_folder(setup, tmp_path):
    from types import SimpleNamespace

    from skyrl_train.config import SkyRLConfig
    from skyrl_train.entrypoints.main_base import BasePPOExp

    engines = setup["engines"]
    start_version = await _reset_to_model_a(setup)
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "generator.inference_engine.weight_sync_backend=delta",
            f"generator.inference_engine.delta_weight_sync.sync_dir={tmp_path / 'sync'}",
            f"generator.inference_engine.delta_weight_sync.local_checkpoint_dir={tmp_path / 'copies'}",
        ]
    )
    strategy = await BasePPOExp(cfg).get_weight_sync(SimpleNamespace(actors=[setup["policy"][0]]), engines)
    try:
        result = await setup["policy"][0].push_weights.remote()
        await strategy.confirm(result.version, result.served_versions)
        version = f"delta-{start_version + 1:08d}"
        assert (tmp_path / "sync" / version / "manifest.json").is_file()
        assert sorted(p.name for p in (tmp_path / "copies").iterdir()) == ["engine-0", "engine-1"]
        assert await _generations(engines, setup["prompts"]) == [(setup["expected_b"], result.version)] * 2
    finally:
        await strategy.close()
