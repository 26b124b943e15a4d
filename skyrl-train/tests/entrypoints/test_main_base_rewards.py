"""BasePPOExp's reward hooks without Ray: roles, the reward scorer, dataset checks and the early function check."""

import json

import pytest
import ray

from skyrl_train.config import SkyRLConfig
from skyrl_train.dataset import DatasetSchemaError
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.rewards.functions import RewardFunctionError
from skyrl_train.rewards.managers import BatchRewardManager


def _config(tmp_path, *overrides):
    rows = [
        {"prompt": [{"role": "user", "content": "1+1="}], "reward_spec": {"method": "rule", "ground_truth": "2"}},
        {"prompt": [{"role": "user", "content": "hi"}], "reward_spec": {"method": "reward_model"}},
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    base = [f"data.train_data=['{data}']", "data.val_data=[]", "environment.env_class=arithmetic"]
    return SkyRLConfig.from_cli_overrides([*base, *overrides], validate=False)


def test_reward_model_rows_need_a_reward_model(tmp_path):
    tokenizer = build_char_tokenizer()
    without = BasePPOExp(_config(tmp_path))
    assert "reward" not in without.roles()
    with pytest.raises(DatasetSchemaError, match=r"train\.jsonl, row 1, column 'reward_spec\.method'.*reward\.model"):
        without.get_train_dataset(tokenizer)
    with_model = BasePPOExp(_config(tmp_path, "reward.model.path=rm"))
    assert with_model.roles()[-1] == "reward"
    assert len(with_model.get_train_dataset(tokenizer)) == 2


def test_the_scorer_exists_only_when_rewards_are_rescored(tmp_path):
    tokenizer = build_char_tokenizer()
    assert BasePPOExp(_config(tmp_path)).get_reward_scorer(tokenizer) is None
    scorer_file = tmp_path / "scorer.py"
    scorer_file.write_text("def score(data_sources, solution_strs, ground_truths, extra_infos):\n    return []\n")
    experiment = BasePPOExp(_config(tmp_path, "reward.manager=batch", f"reward.function={scorer_file}:score"))
    scorer = experiment.get_reward_scorer(tokenizer)
    assert isinstance(scorer.manager, BatchRewardManager) and scorer.reward_group is None
    assert experiment.reward_scorer is scorer  # closed by shutdown()


def test_a_missing_scoring_function_fails_before_ray_starts(tmp_path):
    started_before = ray.is_initialized()
    cfg = _config(tmp_path, "reward.manager=naive", f"reward.function={tmp_path / 'missing.py'}:score")
    with pytest.raises(RewardFunctionError, match="missing.py does not exist"):
        BasePPOExp(cfg).run()
    assert ray.is_initialized() == started_before
