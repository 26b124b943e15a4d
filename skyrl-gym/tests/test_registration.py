"""Tests for the environment registry."""

import pytest

import skyrl_gym
from skyrl_gym import BaseTextEnv, RegistrationError, UnknownEnvError


class TinyEnv(BaseTextEnv):
    def __init__(self, env_config=None, extras=None, bonus: float = 0.0):
        super().__init__(env_config, extras)
        self.bonus = bonus

    def _step(self, action):
        return {"observations": [], "reward": 1.0 + self.bonus, "done": True}


@pytest.fixture
def env_id():
    name = "test_tiny_env"
    yield name
    if name in skyrl_gym.registry:
        skyrl_gym.deregister(name)


def test_register_make_with_string_entry_point_and_kwargs(env_id):
    skyrl_gym.register(env_id, f"{__name__}:TinyEnv", bonus=0.5)
    env = skyrl_gym.make(env_id, extras={"max_turns": 1})
    assert isinstance(env, TinyEnv) and env.bonus == 0.5 and env.spec.id == env_id
    assert skyrl_gym.make(env_id, bonus=2.0).bonus == 2.0  # call kwargs override spec kwargs


def test_register_callable_entry_point(env_id):
    skyrl_gym.register(env_id, lambda **kw: TinyEnv(**kw))
    env = skyrl_gym.make(env_id)
    env.init([])
    assert env.step("x")["reward"] == 1.0


def test_duplicate_id_is_an_error(env_id):
    skyrl_gym.register(env_id, TinyEnv)
    with pytest.raises(RegistrationError, match="already registered"):
        skyrl_gym.register(env_id, TinyEnv)


def test_unknown_id_lists_closest_names():
    with pytest.raises(UnknownEnvError, match="Did you mean 'gsm8k'") as excinfo:
        skyrl_gym.make("gsm8kk")
    assert "Registered:" in str(excinfo.value)
    with pytest.raises(KeyError):  # also catchable as a KeyError
        skyrl_gym.spec("no-such-env-anywhere")


def test_deregister_and_spec(env_id):
    skyrl_gym.register(env_id, TinyEnv)
    assert skyrl_gym.spec(env_id).entry_point is TinyEnv
    skyrl_gym.deregister(env_id)
    assert env_id not in skyrl_gym.registry
    with pytest.raises(UnknownEnvError):
        skyrl_gym.deregister(env_id)


def test_bad_entry_points_are_reported_at_make(env_id):
    skyrl_gym.register(env_id, "no_such_module_xyz:Env")
    with pytest.raises(RegistrationError, match="cannot import module 'no_such_module_xyz'"):
        skyrl_gym.make(env_id)
    skyrl_gym.deregister(env_id)
    skyrl_gym.register(env_id, f"{__name__}:Missing")
    with pytest.raises(RegistrationError, match="has no attribute 'Missing'"):
        skyrl_gym.make(env_id)
    skyrl_gym.deregister(env_id)
    skyrl_gym.register(env_id, "not-an-entry-point")
    with pytest.raises(RegistrationError, match="is not 'module:Attr'"):
        skyrl_gym.make(env_id)
    skyrl_gym.deregister(env_id)
    skyrl_gym.register(env_id, lambda **kw: object())
    with pytest.raises(RegistrationError, match="not a skyrl_gym.Env"):
        skyrl_gym.make(env_id)


def test_invalid_registration_arguments():
    with pytest.raises(RegistrationError, match="non-empty string"):
        skyrl_gym.register("", TinyEnv)
    with pytest.raises(RegistrationError, match="must be 'module:Class' or a callable"):
        skyrl_gym.register("x", 42)


def test_registry_is_read_only_and_lists_builtins(capsys):
    with pytest.raises(TypeError):
        skyrl_gym.registry["x"] = None
    text = skyrl_gym.pprint_registry(num_cols=2)
    assert "gsm8k" in text and "text2sql" in text
    assert capsys.readouterr().out.strip() == text.strip()
