"""Tests for TrainingBatch and the trainer-side response logprobs: padding layout, and parity with the engine."""

import asyncio

import numpy as np
import pytest
import torch

from skyrl_train.generators.types import Trajectory
from skyrl_train.inference import HFInferenceEngine, InferenceEngineInput, SamplingParams
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.training_batch import TrainingBatch

PARITY_TOLERANCE = 1e-5  # fp32, padded batch forward vs the engine's incremental decode


def _trajectory(prompt, response, mask=None, rewards=None, logprobs=None, uid="0"):
    return Trajectory(
        uid=uid,
        env_class="arithmetic",
        prompt_token_ids=prompt,
        response_ids=response,
        loss_mask=mask or [1] * len(response),
        token_rewards=rewards or [0.0] * len(response),
        rollout_logprobs=logprobs,
        stop_reason="stop",
        num_turns=1,
        weight_version=0,
    )


def test_layout_left_pads_prompts_and_right_pads_responses():
    from skyrl_train.training_batch import TrainingBatch

    batch = TrainingBatch.from_trajectories(
        [
            _trajectory([5, 6, 7], [8, 9], rewards=[0.0, 1.0], uid="a"),
            _trajectory([5], [8, 9, 10], mask=[1, 0, 1], uid="b"),
        ],
        pad_token_id=0,
    )
    assert batch.prompt_width == 3 and batch.response_width == 3
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, 0], [0, 0, 5, 8, 9, 10]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    # response_mask: tokens the policy generated (an observation token inside row b is 0), loss_mask: of trained rows
    assert batch.response_mask.tolist() == [[1, 1, 0], [1, 0, 1]]
    assert batch.loss_mask.tolist() == [[1, 1, 0], [1, 0, 1]]
    assert batch.valid.tolist() == [True, True]
    assert batch.token_rewards.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    assert batch.rollout_logprobs is None
    assert batch.select([1]).uids == ["b"] and batch.select([1]).input_ids.tolist() == [[0, 0, 5, 8, 9, 10]]
    with pytest.raises(ValueError, match="at least one trajectory"):
        TrainingBatch.from_trajectories([], 0)


def test_filtered_and_failed_rows_keep_their_generated_tokens_but_leave_the_loss():
    from dataclasses import replace

    from skyrl_train.training_batch import TrainingBatch

    fine = _trajectory([5, 6], [8, 9], rewards=[0.0, 1.0], uid="a")
    overlong = replace(_trajectory([5, 6], [8, 9, 10], rewards=[0.0, 0.0, 1.0], uid="a"), filtered="overlong")
    failed = replace(_trajectory([5], [8], uid="b"), env_error={"kind": "exception", "reason": "boom"})
    batch = TrainingBatch.from_trajectories([fine, overlong, failed], pad_token_id=0)
    assert batch.response_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert batch.loss_mask.tolist() == [[1, 1, 0], [0, 0, 0], [0, 0, 0]]
    assert batch.valid.tolist() == [True, True, False]
    assert batch.select([2, 0]).valid.tolist() == [False, True]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_trainer_logprobs_match_engine_logprobs_with_equal_weights(temperature):
    from skyrl_train.training_batch import TrainingBatch

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelSpec(size=2), seed=4)
    engine = HFInferenceEngine(model, tokenizer)
    prompts = [[3, 20 + i, 30, 4, 3, 50] * (1 + i % 3) for i in range(5)]  # different lengths: real padding
    params = SamplingParams(max_tokens=12, temperature=temperature, seed=0)
    out = asyncio.run(engine.generate(InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params)))
    trajectories = [
        _trajectory(p, ids, logprobs=lps) for p, ids, lps in zip(prompts, out.response_ids, out.response_logprobs)
    ]
    batch = TrainingBatch.from_trajectories(trajectories, tokenizer.pad_token_id)
    with torch.no_grad():
        trainer_lp, entropy = response_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width, temperature, True
        )
    mask = batch.response_mask.bool()
    difference = (trainer_lp - batch.rollout_logprobs).abs()[mask]
    assert difference.max().item() < PARITY_TOLERANCE
    assert entropy.shape == trainer_lp.shape and bool((entropy[mask] > 0).all())


@pytest.mark.parametrize("field", ["loss_mask", "token_rewards", "rollout_logprobs"])
def test_per_token_lists_of_the_wrong_length_name_the_row_and_the_field(field):
    from skyrl_train.training_batch import TrainingBatch

    good = _trajectory([5, 6], [8, 9], logprobs=[-0.1, -0.2], uid="a")
    bad = _trajectory([5], [8, 9, 10], logprobs=[-0.1, -0.2, -0.3], uid="b")
    setattr(bad, field, getattr(bad, field)[:2])
    with pytest.raises(ValueError, match=f"trajectory 1 \\(uid 'b'\\): {field} has 2 entries for 3 response tokens"):
        TrainingBatch.from_trajectories([good, bad], pad_token_id=0)


def test_a_pickled_batch_travels_as_numpy_and_comes_back_equal_and_writable():
    import pickle

    batch = TrainingBatch.from_trajectories(
        [_trajectory([5, 6, 7], [8, 9], logprobs=[-0.5, -1.5]), _trajectory([5], [8, 9, 10], logprobs=[-1.0] * 3)],
        pad_token_id=0,
    )
    batch.extra_bf16 = torch.ones(2, dtype=torch.bfloat16)  # numpy has no bfloat16: such a tensor stays a tensor
    state = batch.__getstate__()
    assert isinstance(state["token_rewards"], np.ndarray) and isinstance(state["extra_bf16"], torch.Tensor)
    restored = pickle.loads(pickle.dumps(batch, protocol=5))
    for name, value in vars(batch).items():
        if isinstance(value, torch.Tensor):
            copy = getattr(restored, name)
            assert isinstance(copy, torch.Tensor) and copy.dtype == value.dtype and torch.equal(copy, value), name
        else:
            assert getattr(restored, name) == value, name
    readonly = np.frombuffer(np.arange(4, dtype=np.int64).tobytes(), dtype=np.int64)  # as a zero-copy buffer arrives
    restored.__setstate__({**vars(restored), "input_ids": readonly.reshape(2, 2)})
    restored.input_ids[0, 0] = 7  # writable: the worker may pad or trim in place


def test_integer_tensors_travel_narrowed_and_come_back_with_their_own_dtype_and_values():
    import pickle

    rows, width = 64, 30  # a policy rank's quickstart mini-batch shard
    batch = TrainingBatch(
        input_ids=torch.randint(0, 300, (rows, width)),  # needs int16
        attention_mask=torch.ones(rows, width, dtype=torch.long),
        position_ids=torch.arange(width).repeat(rows, 1),
        response_mask=torch.ones(rows, 8, dtype=torch.long),
        loss_mask=torch.ones(rows, 8, dtype=torch.int32),
        token_rewards=torch.zeros(rows, 8),
        rollout_logprobs=torch.zeros(rows, 8),
        prompt_width=22,
        uids=[str(i) for i in range(rows)],
    )
    batch.wide = torch.tensor([-(2**40), 2**40])  # only int64 holds these: sent as they are
    batch.negative = torch.tensor([[-100, 5]])  # a label-style ignore index: int8
    batch.empty = torch.zeros(0, dtype=torch.long)
    restored = pickle.loads(pickle.dumps(batch, protocol=5))
    for name, value in vars(batch).items():
        if isinstance(value, torch.Tensor):
            copy = getattr(restored, name)
            assert copy.dtype == value.dtype and torch.equal(copy, value), name
    restored.position_ids[0, 0] = 9  # writable
    state = batch.__getstate__()
    assert state["input_ids"].values.dtype == np.int16 and state["attention_mask"].values.dtype == np.uint8
    assert state["negative"].values.dtype == np.int8 and isinstance(state["wide"], np.ndarray)
    del batch.wide, batch.negative, batch.empty
    narrowed = len(pickle.dumps(batch, protocol=5))
    as_they_are = len(
        pickle.dumps({k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in vars(batch).items()})
    )
    assert narrowed < 0.45 * as_they_are  # two of these per rank fit under Ray's 100 KB inline-argument limit
    assert 2 * narrowed < 100 * 1024


def test_integers_at_full_width_reaches_the_tasks_created_inside_and_ends_with_the_block():
    import pickle

    from skyrl_train.training_batch import integers_at_full_width, on_wire

    batch = TrainingBatch.from_trajectories([_trajectory([3, 4], [5, 6]), _trajectory([7], [8])], pad_token_id=0)

    def state_dtype(value):
        return getattr(value, "values", value).dtype  # a narrowed tensor travels wrapped with its own dtype

    async def pickled_in_a_task():
        with integers_at_full_width():
            task = asyncio.ensure_future(_pickle_later(batch))  # pickles after the block ended, in its context
        full = await task
        return full, pickle.dumps(batch, protocol=5)

    async def _pickle_later(value):
        await asyncio.sleep(0)
        return pickle.dumps(value, protocol=5), state_dtype(value.__getstate__()["input_ids"])

    (full, full_dtype), after = asyncio.run(pickled_in_a_task())
    assert full_dtype == np.int64  # the task kept the block's setting
    assert state_dtype(batch.__getstate__()["input_ids"]) == np.uint8  # outside it: narrowed again
    assert len(after) < len(full)
    for data in (full, after):
        restored = pickle.loads(data)
        assert restored.input_ids.dtype == torch.long and torch.equal(restored.input_ids, batch.input_ids)
    with integers_at_full_width():
        assert isinstance(on_wire(torch.arange(3)).__reduce__()[1][0], np.ndarray)
    assert not isinstance(on_wire(torch.arange(3)).__reduce__()[1][0], np.ndarray)


def test_tensor_arguments_and_update_results_travel_as_numpy_and_arrive_as_writable_tensors():
    import pickle

    from skyrl_train.training_batch import TensorOnWire, on_wire
    from skyrl_train.workers.worker import MiniBatchResult

    arguments = {
        "advantages": torch.randn(4, 3),
        "ids": torch.tensor([[1, 300]]),  # int64 in memory, int16 on the wire
        "half": torch.ones(2, dtype=torch.bfloat16),  # numpy has no bfloat16: pickled by torch
        "denominator": 12.0,
        "none": None,
    }
    wrapped = {name: on_wire(value) for name, value in arguments.items()}
    assert isinstance(wrapped["advantages"], TensorOnWire) and wrapped["denominator"] == 12.0
    payload = pickle.dumps(wrapped, protocol=5)
    numpy_only = pickle.dumps({name: value for name, value in wrapped.items() if name != "half"}, protocol=5)
    assert b"torch.storage" not in numpy_only and b"torch.storage" in pickle.dumps(arguments["advantages"])
    arrived = pickle.loads(payload)
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            assert arrived[name].dtype == value.dtype and torch.equal(arrived[name], value), name
        else:
            assert arrived[name] == value, name
    arrived["advantages"][0, 0] = 5.0  # writable

    result = MiniBatchResult(({"policy/loss": 0.5},), torch.randn(2, 3), None)
    payload = pickle.dumps(result, protocol=5)
    assert b"torch.storage" not in payload
    back = pickle.loads(payload)
    assert isinstance(back, MiniBatchResult) and back.steps == result.steps and back.weight_sync is None
    assert torch.equal(back.old_logprobs, result.old_logprobs)
    assert pickle.loads(pickle.dumps(MiniBatchResult(({},)))).old_logprobs is None


def test_concat_puts_selections_of_one_batch_back_together():
    batch = TrainingBatch.from_trajectories(
        [
            _trajectory([5, 6, 7], [8, 9], uid="a"),
            _trajectory([5], [8, 9, 10], uid="b"),
            _trajectory([6], [7], uid="c"),
        ],
        pad_token_id=0,
    )
    joined = TrainingBatch.concat([batch.select([2]), batch.select([0, 1])])
    reordered = batch.select([2, 0, 1])
    assert joined.uids == ["c", "a", "b"] and joined.prompt_width == batch.prompt_width
    assert joined.rollout_logprobs is None
    for name in ("input_ids", "attention_mask", "position_ids", "response_mask", "loss_mask", "token_rewards", "valid"):
        assert torch.equal(getattr(joined, name), getattr(reordered, name)), name
    other = TrainingBatch.from_trajectories([_trajectory([5], [8])], pad_token_id=0)
    with pytest.raises(ValueError, match="different \\(prompt, total\\) widths"):
        TrainingBatch.concat([batch, other])
