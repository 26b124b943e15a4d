"""RewardScorer: combine rules, placement of the final reward, failures, and the reward model's input, with a real
reward-model worker running in this process (world size 1) and real user functions."""

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from skyrl_train.config import SkyRLConfig
from skyrl_train.generators.types import GeneratorInput, GeneratorOutput, Trajectory
from skyrl_train.models.loading import load_tokenizer
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.rewards.functions import load_reward_function
from skyrl_train.rewards.managers import NaiveRewardManager
from skyrl_train.rewards.scorer import RewardScorer
from skyrl_train.workers import RewardModelWorker

FP32_AGREEMENT = 1e-5  # fp32 worker (left-padded batch) vs a plain unpadded HF forward: float32 rounding only

PROMPTS = [[{"role": "user", "content": f"{a}+{a}="}] for a in range(1, 6)]
RESPONSES = ["2", "5", "6", "8", "10"]  # right, wrong, right, right, right for a+a


class InProcessGroup:
    """The `run_sharded` call of a `WorkerGroup`, answered by one real worker in this process."""

    def __init__(self, worker):
        self.worker = worker

    def run_sharded(self, method, batch, **kwargs):
        return getattr(self.worker, method)(batch, **kwargs)


@pytest.fixture(scope="module")
def reward_group(single_rank_group, tiny_reward_model_dir):
    overrides = [
        "trainer.device=cpu",
        f"reward.model.path={tiny_reward_model_dir}",
        "reward.model.fsdp.mixed_precision.param_dtype=float32",
        "reward.model.micro_batch_size_per_gpu=2",
    ]
    config = SkyRLConfig.from_cli_overrides(overrides, validate=False).to_dict()
    worker = RewardModelWorker("reward", 0, 1, *single_rank_group, config)
    worker.init_model()
    return InProcessGroup(worker)


@pytest.fixture(scope="module")
def policy_tokenizer():
    return build_char_tokenizer()


def _hf_score(path, token_ids):
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return float(model(torch.tensor([token_ids])).logits[0, 0])


def _template_score(path, prompt, response):
    tokenizer = load_tokenizer(path)
    text = tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": response}], tokenize=False)
    return _hf_score(path, tokenizer(text, add_special_tokens=False)["input_ids"])


def _rollouts(tokenizer, methods, env_rewards=None, stop_reasons=None, errors=()):
    """GeneratorInput/Output for PROMPTS x RESPONSES: each response ends with eos; the env reward sits on eos."""
    trajectories, extras = [], []
    for i, response in enumerate(RESPONSES):
        ids = tokenizer.encode(response, add_special_tokens=False) + [tokenizer.eos_token_id]
        rewards = [0.0] * len(ids)
        rewards[-1] = env_rewards[i] if env_rewards else float(int(response) == 2 * (i + 1))
        trajectories.append(
            Trajectory(
                uid=str(i // 2),
                env_class="arithmetic",
                prompt_token_ids=[5, 6],
                response_ids=ids,
                loss_mask=[1] * len(ids),
                token_rewards=rewards,
                rollout_logprobs=None,
                stop_reason=(stop_reasons or ["stop"] * 5)[i],
                num_turns=1,
                weight_version=0,
                env_error={"kind": "exception", "reason": "env broke"} if i in errors else None,
                data_source="arith",
                response_text=response,
            )
        )
        extras.append({"data_source": "arith", "reward_spec": {"method": methods[i], "ground_truth": str(2 * (i + 1))}})
    generator_input = GeneratorInput(
        prompts=PROMPTS, env_classes=["arithmetic"] * 5, env_extras=extras, uids=[t.uid for t in trajectories]
    )
    return generator_input, GeneratorOutput(trajectories)


def _scorer(policy_tokenizer, reward_group, path, **kwargs):
    return RewardScorer(policy_tokenizer, reward_group=reward_group, rm_tokenizer=load_tokenizer(path), **kwargs)


async def test_by_row_gives_model_rows_the_model_score_and_keeps_the_rest(
    policy_tokenizer, reward_group, tiny_reward_model_dir
):
    methods = ["reward_model", "rule", "reward_model", "rule", "reward_model"]
    generator_input, output = _rollouts(policy_tokenizer, methods, errors=(4,))
    before = [list(t.token_rewards) for t in output.trajectories]
    scorer = _scorer(policy_tokenizer, reward_group, tiny_reward_model_dir, combine="by_row", model_coef=1.0)
    metrics = await scorer.score(generator_input, output)
    for i in (0, 2):
        expected = _template_score(tiny_reward_model_dir, PROMPTS[i], RESPONSES[i])  # eos is skipped when decoding
        rewards = output.trajectories[i].token_rewards
        assert rewards[:-1] == [0.0] * (len(rewards) - 1)
        assert rewards[-1] == pytest.approx(expected, abs=FP32_AGREEMENT)
    assert [output.trajectories[i].token_rewards for i in (1, 3, 4)] == [before[i] for i in (1, 3, 4)]
    assert metrics["reward/model_scored"] == 2.0 and metrics["reward/model_truncated"] == 0.0
    scores = [output.trajectories[i].reward for i in (0, 2)]
    assert metrics["reward/model_score_mean"] == pytest.approx(sum(scores) / 2)
    assert "reward/manager_errors" not in metrics  # no manager configured


async def test_sum_adds_model_coef_times_the_score_to_the_manager_reward(
    policy_tokenizer, reward_group, tiny_reward_model_dir, scorer_file
):
    generator_input, output = _rollouts(policy_tokenizer, ["rule"] * 5)
    manager = NaiveRewardManager(load_reward_function(f"{scorer_file}:score"))
    scorer = _scorer(
        policy_tokenizer, reward_group, tiny_reward_model_dir, combine="sum", model_coef=0.5, manager=manager
    )
    metrics = await scorer.score(generator_input, output)
    for i, t in enumerate(output.trajectories):
        rule = float(RESPONSES[i] == str(2 * (i + 1)))
        model = _template_score(tiny_reward_model_dir, PROMPTS[i], RESPONSES[i])
        assert t.reward == pytest.approx(rule + 0.5 * model, abs=FP32_AGREEMENT)
        assert t.token_rewards[-1] == t.reward  # all of it on the last generated token
    assert metrics["reward/manager_scored"] == 5.0 and metrics["reward/rule_score_mean"] == pytest.approx(0.8)
    assert metrics["reward/function/length"] == pytest.approx(sum(map(len, RESPONSES)) / 5)


async def test_model_combine_drops_the_env_reward(policy_tokenizer, reward_group, tiny_reward_model_dir):
    generator_input, output = _rollouts(policy_tokenizer, ["rule"] * 5, env_rewards=[7.0] * 5)
    scorer = _scorer(policy_tokenizer, reward_group, tiny_reward_model_dir, combine="model", model_coef=2.0)
    await scorer.score(generator_input, output)
    for i, t in enumerate(output.trajectories):
        expected = 2.0 * _template_score(tiny_reward_model_dir, PROMPTS[i], RESPONSES[i])
        assert t.reward == pytest.approx(expected, abs=2 * FP32_AGREEMENT)


async def test_sum_with_env_rules_keeps_the_env_rewards_per_token(
    policy_tokenizer, reward_group, tiny_reward_model_dir
):
    generator_input, output = _rollouts(policy_tokenizer, ["rule"] * 5, env_rewards=[3.0] * 5)
    trajectory = output.trajectories[4]  # "10" + eos: a turn reward on the first token, the final one on eos
    trajectory.token_rewards = [1.0, 0.0, 3.0]
    trajectory.loss_mask = [1, 1, 0]  # as if eos were not generated: the score goes on the last generated token
    scorer = _scorer(policy_tokenizer, reward_group, tiny_reward_model_dir, combine="sum")
    await scorer.score(generator_input, output)
    model = _template_score(tiny_reward_model_dir, PROMPTS[4], RESPONSES[4])
    assert trajectory.token_rewards[0] == 1.0 and trajectory.token_rewards[2] == 3.0
    assert trajectory.token_rewards[1] == pytest.approx(model, abs=FP32_AGREEMENT)


async def test_failed_manager_calls_make_the_trajectory_invalid(policy_tokenizer, scorer_file):
    generator_input, output = _rollouts(policy_tokenizer, ["rule"] * 5)
    generator_input.env_extras[1]["extra_info"] = {"kind": "raise"}
    manager = NaiveRewardManager(load_reward_function(f"{scorer_file}:score"))
    metrics = await RewardScorer(policy_tokenizer, manager=manager).score(generator_input, output)
    failed = output.trajectories[1]
    assert failed.env_error == {"kind": "reward_error", "reason": "ValueError: cannot parse the answer"}
    assert failed.token_rewards == [0.0, 0.0] and not failed.is_valid and not failed.is_trained
    assert metrics["reward/manager_errors"] == 1.0 and metrics["reward/manager_timeouts"] == 0.0
    assert [t.reward for t in output.trajectories] == [1.0, 0.0, 1.0, 1.0, 1.0]


async def test_zero_reward_on_non_stop_applies_to_rewritten_rewards(policy_tokenizer, scorer_file):
    generator_input, output = _rollouts(
        policy_tokenizer, ["rule"] * 5, stop_reasons=["stop", "stop", "length"] + ["stop"] * 2
    )
    manager = NaiveRewardManager(load_reward_function(f"{scorer_file}:score"))
    scorer = RewardScorer(policy_tokenizer, manager=manager, zero_reward_on_non_stop=True)
    await scorer.score(generator_input, output)
    assert [t.reward for t in output.trajectories] == [1.0, 0.0, 0.0, 1.0, 1.0]


async def test_a_reward_model_with_another_tokenizer_reads_plain_text(
    policy_tokenizer, single_rank_group, build_reward_model, tmp_path
):
    rm_tokenizer = build_char_tokenizer(alphabet="0123456789+=\n ")  # other ids than the policy's, no template
    rm_tokenizer.chat_template = None
    path = build_reward_model(tmp_path / "plain_rm", tokenizer=rm_tokenizer, seed=1)
    overrides = [
        "trainer.device=cpu",
        f"reward.model.path={path}",
        "reward.model.fsdp.mixed_precision.param_dtype=float32",
    ]
    worker = RewardModelWorker("reward", 0, 1, *single_rank_group, SkyRLConfig.from_cli_overrides(overrides).to_dict())
    worker.init_model()
    generator_input, output = _rollouts(policy_tokenizer, ["reward_model"] * 5)
    scorer = _scorer(policy_tokenizer, InProcessGroup(worker), path, rm_max_length=4)
    metrics = await scorer.score(generator_input, output)
    assert metrics["reward/model_truncated"] == 5.0  # "a+a=\nr" is longer than 4 tokens
    for i, t in enumerate(output.trajectories):
        ids = rm_tokenizer(f"{i + 1}+{i + 1}=\n{RESPONSES[i]}")["input_ids"][-4:]
        assert t.reward == pytest.approx(_hf_score(path, ids), abs=FP32_AGREEMENT)


async def test_model_rows_without_a_model_and_step_wise_output_are_refused(policy_tokenizer, scorer_file):
    manager = NaiveRewardManager(load_reward_function(f"{scorer_file}:score"))
    generator_input, output = _rollouts(policy_tokenizer, ["rule", "reward_model", "rule", "rule", "rule"])
    with pytest.raises(ValueError, match="reward_spec.method=reward_model but no reward model"):
        await RewardScorer(policy_tokenizer, manager=manager).score(generator_input, output)
    generator_input, output = _rollouts(policy_tokenizer, ["rule"] * 5)
    output.trajectories.append(output.trajectories[-1])
    with pytest.raises(ValueError, match="step-wise trajectories are not supported"):
        await RewardScorer(policy_tokenizer, manager=manager).score(generator_input, output)
    with pytest.raises(ValueError, match="reward.combine=sum needs a reward model"):
        RewardScorer(policy_tokenizer, combine="sum", manager=manager)
