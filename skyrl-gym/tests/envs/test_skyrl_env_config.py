"""`skyrl_gym.make` takes env_config the way NovaSky-AI/SkyRL's generator and env code pass it: an OmegaConf
`DictConfig` or a config dataclass (its `environment.skyrl_gym.<env>` section), possibly holding the `env_class`
selector. The selector is dropped once checked; every other key is validated by the env."""

import dataclasses
import logging
import sqlite3

import pytest

import skyrl_gym
from skyrl_gym.envs import BUILTIN_ENVS

omegaconf = pytest.importorskip("omegaconf")


def rule(ground_truth):
    return {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}


def rows(tmp_path):
    """id -> (the keys an env needs in env_config, extras) that build it without contacting any service."""
    with sqlite3.connect(tmp_path / "shop.sqlite") as db:
        db.execute("CREATE TABLE IF NOT EXISTS item (name TEXT)")
    single = {
        name: ({}, rule("1")) for name in ("gsm8k", "math", "aime", "arithmetic", "addition", "reverse", "binary")
    }
    return {
        **single,
        "countdown": ({}, rule({"numbers": [2, 3, 7], "target": 13})),
        "code": ({}, rule([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])),
        "lcb": ({}, rule([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])),
        "gsm8k_multi_turn": ({}, rule("72")),
        "text2sql": ({"db_path": str(tmp_path)}, {**rule("SELECT name FROM item"), "db_id": "shop"}),
        "search": ({"search_url": "http://127.0.0.1:9"}, rule("Paris")),
        "mcp": ({"servers": {"calc": {"transport": "http", "url": "http://127.0.0.1:9/mcp"}}}, rule({"answer": "4"})),
        "searchcode": ({"search_url": "http://127.0.0.1:9"}, rule("42")),
        "openenv": ({"base_url": "http://127.0.0.1:9"}, {}),
        "multiply": ({}, rule("1443")),
        "llm_as_a_judge": ({"model": "judge", "base_url": "http://127.0.0.1:9/v1"}, rule("72")),
    }


def test_every_builtin_env_takes_skyrls_env_config_with_its_selector(tmp_path):
    table = rows(tmp_path)
    assert set(table) == set(BUILTIN_ENVS)
    del table["openenv"]  # its constructor imports openenv-core (~40 s here); `make` treats its env_config the same
    for env_id, (config, extras) in table.items():
        env = skyrl_gym.make(env_id, env_config=omegaconf.DictConfig({"env_class": env_id, **config}), extras=extras)
        assert "env_class" not in env.env_config and env.env_config == config, env_id


def test_every_builtin_env_refuses_an_unknown_env_config_key_by_name(tmp_path):
    for env_id, (config, extras) in rows(tmp_path).items():
        with pytest.raises(ValueError, match="bogus_key"):
            skyrl_gym.make(env_id, env_config={"env_class": env_id, **config, "bogus_key": 1}, extras=extras)


def test_a_selector_naming_another_env_is_refused():
    with pytest.raises(ValueError, match="env 'gsm8k': env_config selects env_class 'aime'"):
        skyrl_gym.make("gsm8k", env_config={"env_class": "aime"}, extras=rule("1"))


@dataclasses.dataclass
class SearchEnvConfig:
    """The shape of SkyRL's `environment.skyrl_gym.search` section (its generator passes it as is)."""

    log_requests: bool = False
    search_url: str = "http://127.0.0.1:9/retrieve"
    topk: int = 5
    timeout: int = 30


def test_skyrls_search_section_is_read_including_log_requests(caplog):
    env = skyrl_gym.make("search", env_config=SearchEnvConfig(log_requests=True), extras=rule("Paris"))
    group = env.toolbox.groups[0]
    assert group.url == "http://127.0.0.1:9/retrieve" and group.topk == 5 and group.log_requests is True
    group.max_attempts, group.backoff_base_s = 1, 0.0  # port 9 refuses at once: one failed request
    with caplog.at_level(logging.INFO, logger="skyrl_gym.tools.search"):
        result = group.search("capital of France")
    assert not result.ok
    assert any("query='capital of France' topk=5 ->" in record.getMessage() for record in caplog.records)
    quiet = skyrl_gym.make("search", env_config=SearchEnvConfig(), extras=rule("Paris")).toolbox.groups[0]
    assert quiet.log_requests is False
