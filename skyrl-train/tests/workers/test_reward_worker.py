"""RewardModelWorker in-process (world size 1): scores are the head's output at each row's last token, equal to a
plain Hugging Face forward, independent of batching; settings it does not support are refused."""

import random

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from skyrl_train.workers import RewardModelWorker
from skyrl_train.workers.reward_worker import ScoringBatch

# fp32 on CPU: the same row padded to another width goes through the same ops on a differently shaped matmul, so
# results agree to float32 rounding (about 1e-7 relative per op, a few layers deep), far below this bound
FP32_AGREEMENT = 1e-5


def _rows(count: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(5, 100) for _ in range(rng.randint(1, 12))] for _ in range(count)]


def _worker(config, group) -> RewardModelWorker:
    worker = RewardModelWorker("reward", 0, 1, *group, config, num_threads=1)
    worker.init_model()
    return worker


def _reward_config(worker_config, path, *extra):
    return worker_config(f"reward.model.path={path}", "reward.model.fsdp.mixed_precision.param_dtype=float32", *extra)


def _hf_scores(path, rows):
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return torch.tensor([float(model(torch.tensor([ids])).logits[0, 0]) for ids in rows])


def test_scores_equal_a_plain_hf_forward_of_each_row(
    single_rank_group, worker_config, tiny_reward_model_dir, build_reward_model
):
    rows = _rows(7)
    worker = _worker(_reward_config(worker_config, tiny_reward_model_dir), single_rank_group)
    scores = worker.score(ScoringBatch(rows))
    expected = _hf_scores(tiny_reward_model_dir, rows)
    assert scores.shape == (7,) and scores.dtype == torch.float32
    assert torch.allclose(scores, expected, atol=FP32_AGREEMENT, rtol=FP32_AGREEMENT)
    assert expected.std() > 0.1  # the rows really get different scores, so the comparison can fail


def test_micro_batch_size_sets_forward_passes_but_not_scores(single_rank_group, worker_config, tiny_reward_model_dir):
    rows = _rows(5, seed=1)
    results = {}
    for size in (1, 2, 8):
        worker = _worker(
            _reward_config(worker_config, tiny_reward_model_dir, f"reward.model.micro_batch_size_per_gpu={size}"),
            single_rank_group,
        )
        passes = []
        worker.model.register_forward_hook(lambda module, args, output, passes=passes: passes.append(1))
        results[size] = (worker.score(ScoringBatch(rows)), len(passes))
    assert [results[size][1] for size in (1, 2, 8)] == [5, 3, 1]
    for size in (2, 8):
        assert torch.allclose(results[size][0], results[1][0], atol=FP32_AGREEMENT, rtol=FP32_AGREEMENT)


def test_bf16_compute_dtype_changes_scores_only_by_rounding(single_rank_group, worker_config, tiny_reward_model_dir):
    rows = _rows(4, seed=2)
    fp32 = _worker(_reward_config(worker_config, tiny_reward_model_dir), single_rank_group).score(ScoringBatch(rows))
    config = worker_config(
        f"reward.model.path={tiny_reward_model_dir}", "reward.model.fsdp.mixed_precision.param_dtype=bfloat16"
    )
    bf16 = _worker(config, single_rank_group).score(ScoringBatch(rows))
    assert not torch.equal(bf16, fp32)  # the key reached the model: it computed in bf16
    # bf16 keeps 8 significant bits (relative error 2^-8 per rounding); one layer of a width-64 model accumulates a
    # few such errors, so a few percent of the score's scale bounds the difference
    assert torch.allclose(bf16, fp32, atol=0.05 * float(fp32.abs().max()) + 0.05)


def test_a_causal_lm_checkpoint_is_refused(single_rank_group, worker_config, tiny_model_dir):
    worker = RewardModelWorker("reward", 0, 1, *single_rank_group, worker_config(f"reward.model.path={tiny_model_dir}"))
    with pytest.raises(ValueError, match=r"reward\.model\.path=.*no trained score head"):
        worker.init_model()


def test_sequence_parallel_is_refused_naming_the_key(single_rank_group, worker_config, tiny_reward_model_dir):
    config = _reward_config(worker_config, tiny_reward_model_dir, "reward.model.sequence_parallel_size=2")
    worker = RewardModelWorker("reward", 0, 1, *single_rank_group, config)
    with pytest.raises(NotImplementedError, match=r"reward\.model\.sequence_parallel_size=2"):
        worker.init_model()


def test_missing_model_path_names_the_reward_key(single_rank_group, worker_config):
    worker = RewardModelWorker("reward", 0, 1, *single_rank_group, worker_config())
    with pytest.raises(ValueError, match=r"set reward\.model\.path"):
        worker.init_model()


def test_scoring_batch_left_pads_and_selects_rows():
    batch = ScoringBatch([[7, 8, 9], [5]])
    input_ids, attention, positions = batch.padded(pad_token_id=0)
    assert input_ids.tolist() == [[7, 8, 9], [0, 0, 5]]
    assert attention.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0]]
    assert batch.select([1, 1]).token_ids == [[5], [5]]
    with pytest.raises(ValueError, match="row 1 has no tokens"):
        ScoringBatch([[1], []])
