"""The pickle guard on real torch.distributed.checkpoint folders in DCP's default format (what Megatron writes): plain
checkpoints pass and still load; a pickle naming anything else, in `.metadata`, in a byte entry or in a `.pt` file, is
refused before anything unpickles it."""

import pickle
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from skyrl_train.utils.pickle_guard import UnsafeCheckpointError, check_pickled_checkpoint, read_metadata


class _TouchOnLoad:
    """Unpickles as `Path(marker).touch()`: proof that a loader ran code from a checkpoint file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _plain_checkpoint(folder: Path, extra: object = None) -> dict:
    state = {"w": torch.arange(6.0).reshape(2, 3), "hyper": {"lr": 0.1, "betas": (0.9, 0.99), "name": "adam"}}
    if extra is not None:
        state["extra"] = extra
    dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    torch.save({"step": 3, "sizes": torch.Size([2, 3])}, folder / "common.pt")
    return state


def test_a_plain_checkpoint_passes_and_still_loads(tmp_path):
    _plain_checkpoint(tmp_path / "ckpt")
    check_pickled_checkpoint(tmp_path / "ckpt")
    loaded = {"w": torch.zeros(2, 3), "hyper": {"lr": 0.0, "betas": (0.0, 0.0), "name": ""}}
    dcp.load(loaded, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    assert torch.equal(loaded["w"], torch.arange(6.0).reshape(2, 3)) and loaded["hyper"]["betas"] == (0.9, 0.99)


def test_a_planted_metadata_is_refused_naming_the_global_and_never_runs(tmp_path):
    _plain_checkpoint(tmp_path / "ckpt")
    marker = tmp_path / "code-ran"
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(_TouchOnLoad(marker)))
    with pytest.raises(UnsafeCheckpointError, match=r"\.metadata names pathlib\.Path\.touch, which is not one of"):
        check_pickled_checkpoint(tmp_path / "ckpt")
    assert not marker.exists()


def test_a_byte_entry_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "code-ran"
    _plain_checkpoint(tmp_path / "ckpt", extra=_TouchOnLoad(marker))  # saving pickles it; nothing runs
    with pytest.raises(UnsafeCheckpointError, match=r"__0_0\.distcp \(entry 'extra'\) does not load with torch's"):
        check_pickled_checkpoint(tmp_path / "ckpt")
    assert not marker.exists()


def test_a_pt_file_that_would_run_code_is_refused(tmp_path):
    _plain_checkpoint(tmp_path / "ckpt")
    marker = tmp_path / "code-ran"
    torch.save({"step": _TouchOnLoad(marker)}, tmp_path / "ckpt" / "common.pt")
    with pytest.raises(UnsafeCheckpointError, match=r"common\.pt does not load with torch's weights-only unpickler"):
        check_pickled_checkpoint(tmp_path / "ckpt")
    assert not marker.exists()


def test_a_byte_entry_pointing_outside_the_folder_is_refused(tmp_path):
    _plain_checkpoint(tmp_path / "ckpt")
    metadata = read_metadata(tmp_path / "ckpt" / ".metadata")
    for info in metadata.storage_data.values():
        info.relative_path = "../elsewhere.distcp"
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(UnsafeCheckpointError, match="the byte entry 'hyper.lr' names no data file of the folder"):
        check_pickled_checkpoint(tmp_path / "ckpt")
