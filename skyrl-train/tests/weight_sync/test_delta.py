"""The `delta` strategy's two halves in one process, over a local folder and an fsspec `memory://` URL: the sender
publishes versions (full, then XOR deltas), a receiver patches its local copy and installs it into a real bf16 `hf`
engine. Telling the engines through Ray is the same as every strategy's (`test_strategies.py` runs `delta` there)."""

import asyncio
import json
import uuid
from pathlib import Path

import fsspec
import pytest
import torch
from safetensors.torch import load_file

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.errors import ConfigValidationError
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.weight_sync import WeightChunk, WeightSyncError, make_weight_sync_strategy
from skyrl_train.weight_sync.delta import GIB, DeltaReceiver, DeltaSender, DeltaStrategy
from skyrl_train.weight_sync.delta_files import MANIFEST_NAME, read_manifest, version_url

CHUNK_BYTES = 16 * 1024


def model_state(seed):
    """A tiny model's weights (float32), as the policy holds them."""
    return dict(build_tiny_model(TinyModelSpec(size=1), seed=seed).state_dict())


def engine():
    """A real bf16 `hf` engine serving the seed-0 tiny model at version 0."""
    model = build_tiny_model(TinyModelSpec(size=1), seed=0).to(torch.bfloat16)
    return HFInferenceEngine(model, build_char_tokenizer())


def sender(sync_dir, **extra):
    info = {
        "dtype": "bfloat16",
        "chunk_bytes": CHUNK_BYTES,
        "engine_handles": [],
        "start_version": 0,
        "sync_dir": sync_dir,
        "max_file_bytes": GIB,
        "publish_workers": 2,
        **extra,
    }
    return DeltaSender(info)


def receiver(sync_dir, target, local_dir=None):
    info = {"device": "cpu", "chunk_bytes": CHUNK_BYTES, "sync_dir": sync_dir, "download_workers": 2}
    return DeltaReceiver({**info, "local_dir": local_dir}, target)


def announce(manifest):
    return WeightChunk(manifest.version, 0, True, [], [], "bfloat16", {})


def served(target):
    return {name: tensor.detach().clone() for name, tensor in target.model.state_dict().items()}


def assert_serves(target, state):
    got = served(target)
    for name, tensor in state.items():
        assert torch.equal(got[name], tensor.to(torch.bfloat16)), name


@pytest.fixture(params=["folder", "memory"])
def sync_dir(request, tmp_path):
    if request.param == "folder":
        yield str(tmp_path / "sync")
        return
    url = f"memory://delta-{uuid.uuid4().hex}"
    yield url
    fsspec.filesystem("memory").rm(url.removeprefix("memory://"), recursive=True)


def test_a_full_version_then_xor_deltas_reach_the_engine_bit_for_bit(sync_dir, tmp_path):
    publisher, target = sender(sync_dir), engine()
    local = receiver(sync_dir, target, local_dir=str(tmp_path / "copy"))
    state = model_state(seed=1)
    first, _, _ = publisher.publish(state.items(), version=1)
    assert first.base_version is None and all(r.file is not None and not r.xor for r in first.tensors)
    assert asyncio.run(local.receive(announce(first))) == 1 == target.weight_version
    assert_serves(target, state)
    full_payload = publisher.last_publish["payload_bytes"]

    trained = dict(state)
    changed = "model.layers.0.mlp.up_proj.weight"
    trained[changed] = state[changed] + 0.01  # one optimizer step's worth on one tensor
    second, _, _ = publisher.publish(trained.items(), version=2)
    assert second.base_version == 1 and all(r.xor for r in second.tensors)
    assert [r.name for r in second.tensors if r.file is not None] == [changed]  # unchanged tensors carry nothing
    changed_bytes = next(record.nbytes for record in second.tensors if record.name == changed)
    assert publisher.last_publish["payload_bytes"] < changed_bytes < full_payload  # only its compressed XOR travels
    assert asyncio.run(local.receive(announce(second))) == 2
    assert_serves(target, trained)
    copy = load_file(str(tmp_path / "copy" / "model.safetensors"))  # the local copy is a plain safetensors file
    assert torch.equal(copy[changed], trained[changed].to(torch.bfloat16))


def test_an_engine_that_missed_versions_replays_them_from_the_folder(sync_dir):
    publisher = sender(sync_dir)
    states = [model_state(seed) for seed in (1, 2, 3)]
    manifests = [publisher.publish(state.items(), version)[0] for version, state in enumerate(states, start=1)]
    assert [m.base_version for m in manifests] == [None, 1, 2]
    late = engine()
    asyncio.run(receiver(sync_dir, late).receive(announce(manifests[2])))  # walks back to the full version 1
    assert_serves(late, states[2])
    behind, target = None, engine()
    behind = receiver(sync_dir, target)
    asyncio.run(behind.receive(announce(manifests[0])))
    asyncio.run(behind.receive(announce(manifests[2])))  # applies 2, then 3
    assert behind.copy.version == 3
    assert_serves(target, states[2])
    with pytest.raises(WeightSyncError, match="already serves version 3"):
        asyncio.run(behind.receive(announce(manifests[1])))


def test_a_tampered_version_is_refused_naming_the_tensor(tmp_path):
    sync_dir = str(tmp_path / "sync")
    publisher, local = sender(sync_dir), receiver(sync_dir, engine())
    state = model_state(seed=1)
    asyncio.run(local.receive(announce(publisher.publish(state.items(), 1)[0])))
    state["model.norm.weight"] = state["model.norm.weight"] * 2
    second = publisher.publish(state.items(), 2)[0]
    manifest_path = Path(f"{version_url(sync_dir, 2)}/{MANIFEST_NAME}")
    raw = json.loads(manifest_path.read_text())
    record = next(r for r in raw["tensors"] if r["name"] == "model.norm.weight")
    record["checksum"] = "0" * 32
    manifest_path.write_text(json.dumps(raw))
    with pytest.raises(WeightSyncError, match="'model.norm.weight' of version 2 does not match the sender's checksum"):
        asyncio.run(local.receive(announce(second)))
    assert local.copy.version is None  # half-patched: the next version is rebuilt from the full version 1
    Path(f"{version_url(sync_dir, 2)}/{record['file']}").write_bytes(b"garbage")
    with pytest.raises(WeightSyncError, match="payload of 'model.norm.weight' does not decompress"):
        asyncio.run(receiver(sync_dir, engine()).receive(announce(second)))
    with pytest.raises(WeightSyncError, match="no delta manifest at .*delta-00000009"):
        read_manifest(sync_dir, 9)


def test_file_size_staging_and_a_new_layout(tmp_path):
    sync_dir = f"memory://delta-{uuid.uuid4().hex}"
    staging = tmp_path / "staging"
    publisher = sender(sync_dir, max_file_bytes=4096, publish_staging_dir=str(staging))
    state = model_state(seed=1)
    manifest = publisher.publish(state.items(), 1)[0]
    files = {record.file for record in manifest.tensors}
    fs = fsspec.filesystem("memory")
    sizes = [fs.size(f"{version_url(sync_dir, 1).removeprefix('memory://')}/{name}") for name in files]
    alone = {record.file for record in manifest.tensors if record.length > 4096}
    assert len(files) > 3 and all(size <= 4096 for name, size in zip(files, sizes) if name not in alone)
    assert staging.is_dir() and list(staging.iterdir()) == []  # files went through the staging folder
    fewer = dict(list(state.items())[:-1])
    assert publisher.publish(fewer.items(), 2)[0].base_version is None  # other tensors: a full version again
    fs.rm(sync_dir.removeprefix("memory://"), recursive=True)


def test_skyrls_delta_keys_reach_the_strategy_and_are_checked():
    overrides = [
        "generator.inference_engine.weight_sync_backend=delta",
        "generator.inference_engine.delta_weight_sync.sync_dir=/mnt/shared/run1",
        "generator.inference_engine.delta_weight_sync.local_checkpoint_dir=/tmp/skyrl-delta-checkpoints/run1",
        "generator.inference_engine.delta_weight_sync.publish_staging_dir=",
        "generator.inference_engine.delta_weight_sync.max_file_size_in_gb=0.5",
        "generator.inference_engine.delta_weight_sync.cloud_download_workers=3",
        "generator.inference_engine.delta_weight_sync.publish_num_workers=6",
        "generator.inference_engine.delta_weight_sync.checkpoint_load_format=vllm_multi_thread_safetensors",
    ]
    cfg = SkyRLConfig.from_cli_overrides(overrides)
    options = DeltaStrategy.options_from_config(cfg)
    assert options == {
        "sync_dir": "/mnt/shared/run1",
        "local_checkpoint_dir": "/tmp/skyrl-delta-checkpoints/run1",
        "publish_staging_dir": None,
        "max_file_bytes": GIB // 2,
        "download_workers": 3,
        "publish_workers": 6,
    }
    strategy = make_weight_sync_strategy("delta", **options)
    sender_info, receiver_infos = strategy.build_init_infos({"device": "cpu"}, [{}, {}])
    assert (sender_info["max_file_bytes"], sender_info["publish_workers"]) == (GIB // 2, 6)
    assert [info["local_dir"] for info in receiver_infos] == [
        "/tmp/skyrl-delta-checkpoints/run1/engine-0",
        "/tmp/skyrl-delta-checkpoints/run1/engine-1",
    ]
    assert receiver_infos[0]["download_workers"] == 3 and receiver_infos[0]["sync_dir"] == "/mnt/shared/run1"
    with pytest.raises(ConfigValidationError, match="memory:// folder lives in one process"):
        SkyRLConfig.from_cli_overrides([*overrides, "generator.inference_engine.delta_weight_sync.sync_dir=memory://x"])
