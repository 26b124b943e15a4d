"""The pieces learn together: generator + hf engine + GRPO + a plain torch optimizer, in one process, on the
warm-started tiny model, raise the addition reward within a handful of steps.

This proves the rollout contract, the logprob alignment and the loss are right together; the product path is the
Ray trainer. The model trains and generates in one process, so the engine serves the updated weights directly.
Training uses a fixed set of prompts, so the rise of their sampled reward is the measured signal.
"""

import asyncio

import pytest
import torch

from skyrl_gym.envs.synthetic.generate import generate_splits
from skyrl_train.algorithms import PolicyLossConfig, compute_advantages, compute_policy_loss
from skyrl_train.generators import GeneratorInput, GeneratorSettings, SkyRLGymGenerator
from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient, SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.recipes.embedded import get_embedded_model
from skyrl_train.recipes.warm_start import WarmStartSettings
from skyrl_train.training_batch import TrainingBatch

# the quickstart's model: the examples' tests build it into the shared cache ($SKYRL_CACHE), so it is built once
SETTINGS = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)
STEPS, PROMPTS, SAMPLES, LR = 24, 16, 8, 2e-4
MIN_RISE = 0.10  # mean sampled reward of the last 3 steps minus that of the first 3


def _inputs(rows, repeat, step):
    return GeneratorInput(
        prompts=[row["prompt"] for row in rows for _ in range(repeat)],
        env_classes=[row["env_class"] for row in rows for _ in range(repeat)],
        env_extras=[
            {k: v for k, v in row.items() if k not in ("prompt", "env_class")} for row in rows for _ in range(repeat)
        ],
        uids=[str(i) for i, _ in enumerate(rows) for _ in range(repeat)],
        seeds=[step * 10_000 + i for i in range(len(rows) * repeat)],
    )


@pytest.mark.slow
@pytest.mark.integration
def test_grpo_raises_the_addition_reward():
    torch.manual_seed(0)
    model_dir = get_embedded_model(SETTINGS, progress=False)
    model, tokenizer = load_causal_lm(str(model_dir)), load_tokenizer(str(model_dir))
    sampling = SamplingParams(max_tokens=8, temperature=1.0)
    client = InferenceEngineClient([HFInferenceEngine(model, tokenizer)])
    generator = SkyRLGymGenerator(client, tokenizer, GeneratorSettings(sampling_params=sampling))
    rows = generate_splits(SETTINGS.task, train_size=PROMPTS, test_size=1, difficulty=SETTINGS.difficulty, seed=11)[
        "train"
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.0)
    rewards = []
    for step in range(STEPS):
        out = asyncio.run(generator.generate(_inputs(rows, SAMPLES, step)))
        rewards.append(sum(out.rewards) / len(out.rewards))
        batch = TrainingBatch.from_trajectories(out.trajectories, tokenizer.pad_token_id)
        advantages, _ = compute_advantages(
            "grpo", token_level_rewards=batch.token_rewards, response_mask=batch.response_mask, index=batch.uids
        )
        model.train()
        logprobs, _ = response_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width
        )
        loss, _ = compute_policy_loss(
            "regular",
            log_probs=logprobs,
            old_log_probs=batch.rollout_logprobs,
            advantages=advantages,
            loss_mask=batch.loss_mask,
            config=PolicyLossConfig(),
        )
        assert torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        model.eval()
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"sampled reward per step: {[round(r, 3) for r in rewards]}")
    assert last >= first + MIN_RISE, f"GRPO did not raise the reward: first steps {first:.3f}, last steps {last:.3f}"
