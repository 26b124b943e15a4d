"""Every built-in env against the implicit-episode rule: single-turn envs score a step taken without `init()` exactly
as after `init()`; multi-turn envs refuse it with `EnvStateError`."""

import sqlite3

import pytest

import skyrl_gym
from skyrl_gym import EnvStateError
from skyrl_gym.envs import BUILTIN_ENVS
from skyrl_gym.envs.llm_judge.demo_judge import DemoJudge

ADD_TESTS = [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}]
LCB_FUNCTIONAL = '[{"input": "3", "output": "9", "testtype": "functional", "metadata": {"func_name": "square"}}]'


def rule(ground_truth):
    return {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}


# id -> (env_config, extras, [(action, hand-checked reward), ...]); a right and a wrong answer each.
SINGLE_TURN = {
    "gsm8k": ({}, rule("72"), [("She pays 8 * 9 = 72.\n#### 72", 1.0), ("#### 71", 0.0)]),
    "math": ({}, rule("\\frac{1}{2}"), [("so \\boxed{0.5}", 1.0), ("\\boxed{2}", 0.0)]),
    "aime": ({}, rule("33"), [("\\boxed{033}", 1.0), ("\\boxed{34}", -1.0)]),
    "arithmetic": ({}, rule("47"), [("<answer>47</answer>", 1.0), ("46", 0.0)]),
    "addition": ({}, rule("5"), [("5", 1.0), ("6", 0.0)]),
    "countdown": ({}, rule({"numbers": [2, 3, 7], "target": 13}), [("2*3+7", 1.0), ("2+3+7", 0.0)]),
    "reverse": ({}, rule("cba"), [("cba", 1.0), ("abc", 0.0)]),
    "code": (
        {"timeout_s": 5.0},
        rule(ADD_TESTS),
        [("```python\na, b = map(int, input().split())\nprint(a + b)\n```", 1.0), ("```python\nprint(6)\n```", 0.0)],
    ),
    "lcb": (
        {"timeout_s": 5.0},
        rule(LCB_FUNCTIONAL),
        [
            ("```python\ndef square(x):\n    return x * x\n```", 1.0),
            ("```python\ndef square(x):\n    return x\n```", 0.0),
        ],
    ),
}
SANDBOXED = {"code", "lcb"}
JUDGE_URL = "<the demo judge's URL>"
SINGLE_TURN["llm_as_a_judge"] = ({"base_url": JUDGE_URL}, rule("72"), [("#### 72", 1.0), ("#### 71", 0.0)])


@pytest.fixture(scope="module")
def judge_url():
    """A rule-grading judge on 127.0.0.1 for the `llm_as_a_judge` env."""
    with DemoJudge() as judge:
        yield judge.base_url


def multi_turn_rows(tmp_path):
    """id -> (env_config, extras) that build each multi-turn env without contacting any service."""
    with sqlite3.connect(tmp_path / "shop.sqlite") as db:
        db.execute("CREATE TABLE IF NOT EXISTS item (name TEXT)")
    return {
        "gsm8k_multi_turn": ({}, rule("72")),
        "text2sql": ({"db_path": str(tmp_path)}, {**rule("SELECT name FROM item"), "db_id": "shop"}),
        "search": ({"search_url": "http://127.0.0.1:9"}, rule("Paris")),
        "mcp": ({"servers": {"calc": {"transport": "http", "url": "http://127.0.0.1:9/mcp"}}}, rule({"answer": "4"})),
        "searchcode": ({"search_url": "http://127.0.0.1:9"}, rule("42")),
        "openenv": ({"base_url": "http://127.0.0.1:9"}, {}),  # the client connects on first use only
        "multiply": ({}, rule("1443")),
    }


def test_every_builtin_env_is_covered_here(tmp_path):
    multi_turn = set(multi_turn_rows(tmp_path))
    assert set(SINGLE_TURN) | multi_turn == set(BUILTIN_ENVS) and not set(SINGLE_TURN) & multi_turn


@pytest.mark.parametrize(
    "env_id",
    [pytest.param(i, marks=pytest.mark.integration) if i in SANDBOXED else i for i in sorted(SINGLE_TURN)],
)
def test_single_turn_env_steps_without_init(env_id, request):
    env_config, extras, cases = SINGLE_TURN[env_id]
    if env_config.get("base_url") == JUDGE_URL:
        env_config = {**env_config, "base_url": request.getfixturevalue("judge_url")}
    implicit = skyrl_gym.make(env_id, env_config=env_config, extras=extras)
    assert implicit.max_turns == 1
    for action, reward in cases:  # one env object, one implicit episode per step (SkyRL's usage)
        out = implicit.step(action)
        assert out["reward"] == reward and out["done"] is True, (action, out)
        assert implicit.get_metrics()["turns"] == 1
    for action, reward in cases:  # the same rewards through an explicit init
        explicit = skyrl_gym.make(env_id, env_config=env_config, extras=extras)
        explicit.init([{"role": "user", "content": "question"}])
        assert explicit.step(action)["reward"] == reward


def test_single_turn_env_with_a_malformed_row_fails_loudly_on_the_implicit_init():
    env = skyrl_gym.make("gsm8k", extras=rule("seventy-two"))
    with pytest.raises(ValueError, match="reward_spec.ground_truth must be a number"):
        env.step("#### 72")


def test_multi_turn_envs_require_init(tmp_path):
    for env_id, (env_config, extras) in multi_turn_rows(tmp_path).items():
        env = skyrl_gym.make(env_id, env_config=env_config, extras=extras)
        assert env.max_turns > 1, env_id
        with pytest.raises(EnvStateError, match=r"step called before init\(\); a multi-turn env .* needs env.init"):
            env.step("anything")
        env.close()


def test_a_multi_turn_env_run_with_max_turns_1_starts_implicitly(tmp_path):
    env_config, extras = multi_turn_rows(tmp_path)["search"]
    env = skyrl_gym.make("search", env_config=env_config, extras={**extras, "max_turns": 1})
    out = env.step("<answer>paris</answer>")  # answered without searching: the server is never contacted
    assert out["reward"] == 1.0 and out["done"] is True


def test_omegaconf_env_config_is_accepted():
    omegaconf = pytest.importorskip("omegaconf")
    config = omegaconf.DictConfig({"mode": "flexible", "format_reward": 0.1})
    env = skyrl_gym.make("gsm8k", env_config=config, extras=rule("72"))
    assert env.step("so 72")["reward"] == 1.0  # flexible mode read from the DictConfig
    assert env.step("so 71")["reward"] == 0.1
    nested = omegaconf.DictConfig({"sandbox": {"timeout_s": 2}})
    assert skyrl_gym.make("searchcode", env_config=nested, extras=rule("1")).toolbox.groups[1].limits.timeout_s == 2
