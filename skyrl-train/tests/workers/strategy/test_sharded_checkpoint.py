"""Sharded checkpoints load without unpickling (security review #3): safetensors shards and JSON round-trip the model
and optimizer, and a planted pickle (`.metadata` of torch DCP's own format) is refused before it is read, locally and
through an fsspec URL."""

import json
import pickle
import uuid
from pathlib import Path

import fsspec
import pytest
import torch

from skyrl_train.config import FSDPConfig, OptimizerConfig
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.workers.strategy import FSDP2Strategy
from skyrl_train.workers.strategy.sharded_checkpoint import PickledCheckpointError, split_state


class _TouchOnLoad:
    """Unpickles as `Path(marker).touch()`: proof that a loader ran code from a checkpoint file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _strategy(weight_decay: float = 0.01):
    config = OptimizerConfig(lr=0.1, weight_decay=weight_decay, scheduler="cosine", num_warmup_steps=0)
    strategy = FSDP2Strategy(FSDPConfig(), torch.device("cpu"), optimizer=config)
    return strategy, strategy.prepare(build_tiny_model(TinyModelSpec(size=1), seed=0), num_training_steps=10)


def _train_step(strategy, model):
    strategy.backward(model(torch.tensor([[5, 6, 7]])).logits.float().pow(2).mean())
    strategy.optimizer_step()


def _local_state(strategy) -> dict:
    tensors, values, _ = split_state(strategy._sharded_state())
    local = {key: (t.to_local() if hasattr(t, "to_local") else t).detach().clone() for key, t in tensors.items()}
    return {**local, **values}


def test_a_checkpoint_is_safetensors_and_json_and_round_trips_model_and_optimizer(single_rank_group, tmp_path):
    strategy, model = _strategy(weight_decay=0.05)
    for _ in range(2):
        _train_step(strategy, model)
    strategy.save_checkpoint(tmp_path / "ckpt")
    names = sorted(path.name for path in (tmp_path / "ckpt").iterdir())
    assert names == ["extra_state_rank0.json", "shard-00001-model-00001-of-00001.safetensors"]
    own = json.loads((tmp_path / "ckpt" / "extra_state_rank0.json").read_text())
    assert own["sharded_state"]["aliases"] == {"model.lm_head.weight": "model.model.embed_tokens.weight"}  # tied

    resumed, _ = _strategy(weight_decay=0.0)
    resumed.load_checkpoint(tmp_path / "ckpt")
    expected, got = _local_state(strategy), _local_state(resumed)
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        assert torch.equal(got[key], value) if isinstance(value, torch.Tensor) else got[key] == value, key
    group = resumed.optimizer.param_groups[0]
    assert group["weight_decay"] == 0.05 and group["betas"] == (0.9, 0.999)  # the checkpoint's, as tuples again


def test_a_planted_pickled_metadata_is_refused_and_never_unpickled(single_rank_group, tmp_path):
    strategy, model = _strategy()
    _train_step(strategy, model)
    strategy.save_checkpoint(tmp_path / "ckpt")
    marker = tmp_path / "code-ran"
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(_TouchOnLoad(marker)))
    with pytest.raises(PickledCheckpointError, match=r"holds \['.metadata'\]: files of torch.distributed.checkpoint"):
        strategy.load_checkpoint(tmp_path / "ckpt")
    assert not marker.exists()


def test_the_reviews_folder_of_a_pickle_and_an_empty_json_is_refused(single_rank_group, tmp_path):
    strategy, _ = _strategy()
    folder = tmp_path / "planted"
    folder.mkdir()
    (folder / "extra_state_rank0.json").write_text("{}")
    marker = tmp_path / "code-ran"
    (folder / ".metadata").write_bytes(pickle.dumps(_TouchOnLoad(marker)))
    (folder / "__0_0.distcp").write_bytes(pickle.dumps(_TouchOnLoad(marker)))
    with pytest.raises(PickledCheckpointError, match="never loaded because unpickling a file from a checkpoint"):
        strategy.load_checkpoint(folder)
    assert not marker.exists()


def test_an_fsspec_checkpoint_round_trips_and_a_planted_pickle_in_it_is_refused(single_rank_group, tmp_path):
    strategy, model = _strategy()
    _train_step(strategy, model)
    url = f"memory://skyrl-ckpt-{uuid.uuid4().hex}"
    strategy.save_checkpoint(url, extra={"step": 1})
    resumed, _ = _strategy()
    assert resumed.load_checkpoint(url) == {"step": 1}
    assert torch.equal(
        _local_state(resumed)["model.model.norm.weight"], _local_state(strategy)["model.model.norm.weight"]
    )

    marker = tmp_path / "code-ran"
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(f"{path}/.metadata", pickle.dumps(_TouchOnLoad(marker)))
    with pytest.raises(PickledCheckpointError, match=r"memory://skyrl-ckpt-.* holds \['.metadata'\]"):
        resumed.load_checkpoint(url)
    assert not marker.exists()
    fs.rm(path, recursive=True)


def test_a_checkpoint_of_another_model_is_refused_naming_what_differs(single_rank_group, tmp_path):
    strategy, _ = _strategy()
    strategy.save_checkpoint(tmp_path / "ckpt")
    own_file = tmp_path / "ckpt" / "extra_state_rank0.json"
    own = json.loads(own_file.read_text())
    del own["sharded_state"]["values"]["optimizer.param_groups.0.lr"]
    own_file.write_text(json.dumps(own))
    with pytest.raises(ValueError, match=r"does not match this model: \['optimizer.param_groups.0.lr'\]"):
        _strategy()[0].load_checkpoint(tmp_path / "ckpt")
