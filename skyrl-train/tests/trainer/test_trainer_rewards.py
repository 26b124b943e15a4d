"""One training step on local Ray with a reward model (colocated and on its own workers): the rewards the trainer
trains on are the reward model's scores of the rows that ask for it."""

import copy
import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from skyrl_train.dataset.loading import load_files
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.models.loading import load_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# 2 fp32 FSDP ranks scoring left-padded micro-batches vs one unpadded HF forward per row: float32 rounding only
FP32_AGREEMENT = 1e-5


class RecordingExp(BasePPOExp):
    """The real experiment; it keeps a copy of what the reward scorer returned, to check it after the run."""

    def get_reward_scorer(self, tokenizer):
        scorer = super().get_reward_scorer(tokenizer)
        self.scored = []
        score = scorer.score

        async def recording(generator_input, output):
            metrics = await score(generator_input, output)
            self.scored.append((generator_input, copy.deepcopy(output), metrics))
            return metrics

        scorer.score = recording
        return scorer


def _reward_model_rows(data_dir, out_dir):
    rows = load_files([str(data_dir / "train.parquet")])[0].rows
    path = out_dir / "rm_rows.jsonl"
    with path.open("w") as handle:
        for row in rows:  # the arithmetic env still reads its ground truth; the reward model decides the reward
            row = dict(row, reward_spec={"method": "reward_model", "ground_truth": row["reward_spec"]["ground_truth"]})
            handle.write(json.dumps(row) + "\n")
    return path


def _expected_scores(path, policy_tokenizer, generator_input, output):
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(path)
    scores = []
    for prompt, trajectory in zip(generator_input.prompts, output.trajectories):
        response = policy_tokenizer.decode(trajectory.response_ids, skip_special_tokens=True)
        text = tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": response}], tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            scores.append(float(model(torch.tensor([ids])).logits[0, 0]))
    return torch.tensor(scores)


@pytest.mark.parametrize("colocate", [True, False], ids=["colocated", "separate"])
def test_one_step_trains_on_the_reward_models_scores(
    ray_cluster, make_config, spread_tiny_model_dir, tiny_reward_model_dir, data_dir, tmp_path, colocate
):
    cfg = make_config(
        spread_tiny_model_dir,
        data_dir,
        tmp_path,
        f"data.train_data=['{_reward_model_rows(data_dir, tmp_path)}']",
        "data.val_data=[]",
        f"reward.model.path={tiny_reward_model_dir}",
        "reward.model.fsdp.mixed_precision.param_dtype=float32",
        "reward.model.micro_batch_size_per_gpu=3",
        f"trainer.placement.reward_num_gpus_per_node={2 if colocate else 1}",
        colocate=colocate,
    )
    experiment = RecordingExp(cfg)
    result = experiment.run()
    assert result.global_step == 1 and len(experiment.scored) == 1
    generator_input, output, metrics = experiment.scored[0]
    rewards = torch.tensor([t.reward for t in output.trajectories])
    assert all(t.is_valid for t in output.trajectories) and len(rewards) == 16
    expected = _expected_scores(tiny_reward_model_dir, experiment.trainer.tokenizer, generator_input, output)
    assert torch.allclose(rewards, expected, atol=FP32_AGREEMENT, rtol=FP32_AGREEMENT)
    assert any(float(r) not in (0.0, 1.0) for r in rewards)  # not the env's 0/1 rewards
    history = result.history
    assert history["reward/model_scored"][-1][1] == 16.0
    assert history["reward/mean"][-1][1] == pytest.approx(float(rewards.mean()), abs=1e-5)  # what was trained on
    assert history["reward/model_score_mean"][-1][1] == pytest.approx(float(rewards.mean()), abs=1e-5)
    assert experiment.reward_group.actors == []  # shut down with the other groups
