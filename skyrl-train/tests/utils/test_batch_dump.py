"""`trainer.dump_data_batch`: the step's batch lands in a safetensors file under `export_path/dumped_data` that plain
safetensors reads back (no unpickling), with the row metadata; nothing is written when the key is off."""

import pytest
import torch
from safetensors.torch import load_file

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.types import Trajectory
from skyrl_train.training_batch import TrainingBatch
from skyrl_train.utils.batch_dump import BatchDump, load_batch_dump
from skyrl_train.utils.timer import PhaseTimer


def _batch() -> TrainingBatch:
    trajectories = [
        Trajectory(
            uid=uid,
            env_class="t",
            prompt_token_ids=prompt,
            response_ids=response,
            loss_mask=[1] * len(response),
            token_rewards=[0.0] * (len(response) - 1) + [reward],
            rollout_logprobs=[-0.5] * len(response),
            stop_reason="stop",
            num_turns=1,
            weight_version=0,
            env_error={"kind": "exception", "reason": "x"} if reward < 0 else None,
        )
        for uid, prompt, response, reward in [
            ("a", [3, 4, 5], [7, 8], 1.0),
            ("a", [3, 4, 5], [9], 0.0),
            ("b", [6], [10, 11, 12], -1.0),
        ]
    ]
    return TrainingBatch.from_trajectories(trajectories, pad_token_id=0)


def _dumper(tmp_path, enabled: bool) -> BatchDump:
    overrides = [f"trainer.export_path={tmp_path}", f"trainer.dump_data_batch={str(enabled).lower()}"]
    return BatchDump.from_config(SkyRLConfig.from_cli_overrides(overrides))


def test_the_dumped_file_holds_the_batch_and_its_step_tensors(tmp_path):
    batch = _batch()
    advantages = torch.arange(9, dtype=torch.float32).reshape(3, 3) * batch.response_mask
    returns, ref = advantages + 1, torch.full((3, 3), -0.25)
    timer = PhaseTimer()
    _dumper(tmp_path, True).write(7, batch, timer, advantages, returns, None, ref, None)

    path = tmp_path / "dumped_data" / "global_step_7_training_input.safetensors"
    plain = load_file(path)  # safetensors alone reads it
    tensors, metadata = load_batch_dump(path)
    copied = ("input_ids", "attention_mask", "response_mask", "loss_mask", "token_rewards", "valid")
    step = {"advantages", "returns", "ref_logprobs"}  # no old log-probs and no values this step: left out, not zeros
    assert set(plain) == set(tensors) == {*copied, "position_ids", "rollout_logprobs", *step}
    for name in copied:
        assert torch.equal(tensors[name], getattr(batch, name)), name
    assert torch.equal(tensors["advantages"], advantages) and torch.equal(tensors["ref_logprobs"], ref)
    assert tensors["valid"].tolist() == [True, True, False]
    assert metadata == {"global_step": 7, "prompt_width": 3, "uids": ["a", "a", "b"]}
    # response token j of row i sits at column prompt_width + j
    assert tensors["input_ids"][2, 3:].tolist() == [10, 11, 12]
    assert "timing/dump_data_batch" in timer.metrics()


def test_nothing_is_written_when_the_key_is_off(tmp_path):
    timer = PhaseTimer()
    batch = _batch()
    _dumper(tmp_path, False).write(1, batch, timer, batch.token_rewards, batch.token_rewards)
    assert not (tmp_path / "dumped_data").exists()
    assert timer.metrics() == {}


def test_a_file_that_is_not_a_dump_is_named(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match="other.safetensors is not a dumped training batch"):
        load_batch_dump(tmp_path / "other.safetensors")
