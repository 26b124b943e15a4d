"""The agent training example for real: Ray, an FSDP2 rank, an hf engine and the `skyrl_agent` workflow, two GRPO
steps from a briefly warm-started agent model (it writes tool calls, rarely right ones: enough turns and
observations to check the plumbing). Every row the trainer trains on is checked against what the engine sampled."""

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
from train_agent import main  # noqa: E402

from skyrl_agent.backends import SkyRLTrainBackend  # noqa: E402
from skyrl_train.training_batch import TrainingBatch  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def recorded(monkeypatch):
    """What the engine sampled per context (backend calls) and every batch the trainer built, from the driver."""
    sampled: dict[tuple, list[list[int]]] = {}
    batches: list[TrainingBatch] = []
    generate, build = SkyRLTrainBackend.generate, TrainingBatch.from_trajectories.__func__

    async def recording_generate(self, request):
        turn = await generate(self, request)
        sampled.setdefault(tuple(request.prompt_ids), []).append(list(turn.token_ids))
        return turn

    def recording_build(cls, trajectories, pad_token_id):
        batch = build(cls, trajectories, pad_token_id)
        batches.append(batch)
        return batch

    monkeypatch.setattr(SkyRLTrainBackend, "generate", recording_generate)
    monkeypatch.setattr(TrainingBatch, "from_trajectories", classmethod(recording_build))
    return sampled, batches


def generated_segments(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of 1s."""
    segments, start = [], None
    for index, value in enumerate(mask + [0]):
        if value and start is None:
            start = index
        elif not value and start is not None:
            segments.append((start, index))
            start = None
    return segments


def test_two_grpo_steps_train_on_exactly_the_sampled_multi_turn_tokens(own_ray, recorded, tmp_path, agent_cache):
    sampled, batches = recorded
    overrides = [
        "trainer.max_training_steps=2",
        "trainer.eval_before_train=false",
        "trainer.eval_interval=0",
        "trainer.train_batch_size=4",
        "trainer.policy_mini_batch_size=4",
        "generator.n_samples_per_prompt=4",
        "trainer.micro_train_batch_size_per_gpu=16",
        "trainer.micro_forward_batch_size_per_gpu=16",
        "generator.sampling_params.max_generate_length=64",
    ]
    before, after = main(
        [
            "--out",
            str(tmp_path / "out"),
            "--warm-start-steps",
            "40",
            "--train-size",
            "16",
            "--test-size",
            "4",
            *overrides,
        ]
    )
    assert math.isnan(before) and 0.0 <= after <= 1.0
    assert len(batches) == 2 and all(len(batch) == 16 for batch in batches)
    turns_per_row, observed_rows = [], 0
    for batch in batches:
        for row in range(len(batch)):
            ids = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
            prompt_len = int(batch.attention_mask[row, : batch.prompt_width].sum())
            mask = batch.response_mask[row, : len(ids) - prompt_len].int().tolist()
            segments = generated_segments(mask)
            turns_per_row.append(len(segments))
            observed_rows += 0 in mask[: segments[-1][0]] if segments else 0
            for start, end in segments:  # each model turn: exactly what the engine sampled for that context
                context = tuple(ids[: prompt_len + start])
                assert context in sampled, f"row {row}: no engine call had this context"
                turn = ids[prompt_len + start : prompt_len + end]
                assert any(s[: len(turn)] == turn and len(s) == len(turn) for s in sampled[context]), f"row {row}"
    assert max(turns_per_row) >= 2 and observed_rows > 0  # multi-turn rows with loss-masked observations between
