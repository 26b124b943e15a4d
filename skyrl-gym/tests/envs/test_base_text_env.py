"""Tests for BaseTextEnv: turn accounting, max_turns, output validation, state errors and metrics."""

import pytest

from skyrl_gym import BaseTextEnv, EnvOutputError, EnvStateError, check_step_output


class EchoEnv(BaseTextEnv):
    """Rewards 1.0 when the action says 'stop', otherwise asks again with reward 0.25."""

    default_max_turns = 3

    def _step(self, action):
        if action == "stop":
            return {"observations": [], "reward": 1.0, "done": True, "metadata": {"said": action}}
        return {"observations": [{"role": "user", "content": "again"}], "reward": 0.25, "done": False}


def test_turns_are_counted_and_episode_ends_on_done():
    env = EchoEnv()
    prompt = [{"role": "user", "content": "hi"}]
    assert env.init(prompt) == (prompt, {})
    first = env.step("go")
    assert first == {
        "observations": [{"role": "user", "content": "again"}],
        "reward": 0.25,
        "done": False,
        "metadata": {},
        "postprocessed_action": None,
    }
    last = env.step("stop")
    assert last["done"] and last["reward"] == 1.0 and last["metadata"] == {"said": "stop"}
    assert env.get_metrics() == {"turns": 2, "episode_reward": 1.25}


def test_max_turns_forces_done_and_marks_truncation():
    env = EchoEnv(extras={"max_turns": 2})
    env.init([])
    assert env.step("a")["done"] is False
    out = env.step("b")
    assert out["done"] is True and out["observations"] == [] and out["metadata"]["truncated"] is True
    assert out["reward"] == 0.25  # the turn's own reward is kept


def test_max_turns_precedence_extras_then_config_then_class_default():
    assert EchoEnv().max_turns == 3
    assert EchoEnv(env_config={"max_turns": 4}).max_turns == 4
    assert EchoEnv(env_config={"max_turns": 4}, extras={"max_turns": 7}).max_turns == 7
    with pytest.raises(ValueError, match="max_turns must be a positive integer, got 0"):
        EchoEnv(extras={"max_turns": 0})


def test_out_of_order_use_raises_state_errors():
    env = EchoEnv()
    with pytest.raises(EnvStateError, match="before init"):
        env.step("x")
    env.init([])
    env.step("stop")
    with pytest.raises(EnvStateError, match="after the episode ended"):
        env.step("x")
    env.init([])  # a new episode resets the tallies
    assert env.turns == 0 and env.episode_reward == 0.0
    env.close()
    env.close()  # idempotent
    with pytest.raises(EnvStateError, match="after close"):
        env.init([])


def test_non_string_action_is_rejected():
    env = EchoEnv()
    env.init([])
    with pytest.raises(TypeError, match="expects the model's text as a str, got list"):
        env.step(["not", "text"])


@pytest.mark.parametrize(
    "output, message",
    [
        ("text", "returned str; expected a dict"),
        ({"observations": [], "reward": 1.0}, "missing 'done'"),
        ({"observations": "hi", "reward": 1.0, "done": True}, "'observations' is str"),
        ({"observations": [{"content": "x"}], "reward": 1.0, "done": True}, r"'observations\[0\]'"),
        ({"observations": [{"role": "user", "content": 3}], "reward": 1.0, "done": True}, "content' must be a string"),
        ({"observations": [], "reward": float("nan"), "done": True}, "'reward' is nan"),
        ({"observations": [], "reward": "1", "done": True}, "'reward' is '1'"),
        ({"observations": [], "reward": True, "done": True}, "'reward' is True"),
        ({"observations": [], "reward": 1.0, "done": 1}, "'done' is 1"),
        ({"observations": [], "reward": 1.0, "done": True, "metadata": []}, "'metadata' is list"),
        ({"observations": [], "reward": 1.0, "done": True, "extra": 1}, r"unknown keys \['extra'\]"),
    ],
)
def test_malformed_outputs_name_the_field(output, message):
    with pytest.raises(EnvOutputError, match=message):
        check_step_output(output, "MyEnv")


def test_integer_reward_is_accepted_as_float():
    out = check_step_output({"observations": [], "reward": 1, "done": True}, "E")
    assert out["reward"] == 1.0 and isinstance(out["reward"], float) and out["metadata"] == {}


def test_ground_truth_helper_names_missing_field():
    env = EchoEnv(extras={"reward_spec": {"method": "rule"}})
    with pytest.raises(ValueError, match=r"needs extras\['reward_spec'\]\['ground_truth'\]"):
        env.ground_truth()
    assert EchoEnv(extras={"reward_spec": {"ground_truth": 5}}).ground_truth() == 5
    with pytest.raises(ValueError, match="reward_spec'\\] must be a dict"):
        _ = EchoEnv(extras={"reward_spec": "5"}).reward_spec


def test_aggregate_metrics_averages_numeric_keys_only():
    episodes = [{"turns": 1, "solved": True, "name": "a"}, {"turns": 3, "solved": False}, {"turns": 2}]
    assert EchoEnv.aggregate_metrics(episodes) == {"turns": 2.0, "solved": 0.5}
    assert EchoEnv.aggregate_metrics([]) == {}


# ----- implicit episodes (stepping a single-turn env without init, as SkyRL's examples do) --------------------------
class TallyingEnv(EchoEnv):
    """EchoEnv that tallies its "go" actions and whether it was told to stop, as `episode_tallies`."""

    episode_tallies = {"goes": 0, "stopped": False}

    def _step(self, action):
        self.goes += action == "go"
        self.stopped = action == "stop"
        return super()._step(action)


def test_episode_tallies_start_at_their_values_every_episode_and_are_reported():
    env = TallyingEnv()
    assert (env.goes, env.stopped) == (0, False)
    env.init([])
    env.step("go")
    env.step("go")
    env.step("stop")
    assert env.get_metrics() == {"turns": 3, "episode_reward": 1.5, "goes": 2, "stopped": True}
    env.init([])
    assert env.get_metrics() == {"turns": 0, "episode_reward": 0.0, "goes": 0, "stopped": False}


class CountingEnv(BaseTextEnv):
    """Single-turn: records every init prompt; the reward is 1.0 when the action equals the ground truth."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.init_prompts = []

    def init(self, prompt):
        self.init_prompts.append(prompt)
        self.truth = self.ground_truth()  # read at init, as the built-in single-turn envs do
        return super().init(prompt)

    def _step(self, action):
        return {"observations": [], "reward": float(action == self.truth), "done": True}


def test_single_turn_step_without_init_starts_an_implicit_episode():
    env = CountingEnv(extras={"reward_spec": {"ground_truth": "yes"}})
    out = env.step("yes")
    assert out["reward"] == 1.0 and out["done"] is True
    assert env.init_prompts == [[]]  # the subclass's init ran, with an empty prompt
    assert env.get_metrics() == {"turns": 1, "episode_reward": 1.0}
    # every further step without init is an episode of its own, with fresh tallies
    assert env.step("no")["reward"] == 0.0
    assert env.init_prompts == [[], []] and env.get_metrics() == {"turns": 1, "episode_reward": 0.0}


def test_after_an_explicit_init_a_finished_episode_still_needs_init():
    env = CountingEnv(extras={"reward_spec": {"ground_truth": "yes"}})
    env.step("yes")  # implicit
    env.init([{"role": "user", "content": "q"}])  # explicit from now on
    env.step("yes")
    with pytest.raises(EnvStateError, match="after the episode ended"):
        env.step("yes")
    assert len(env.init_prompts) == 2


def test_implicit_init_errors_surface_from_step():
    env = CountingEnv(extras={})
    with pytest.raises(ValueError, match=r"needs extras\['reward_spec'\]\['ground_truth'\]"):
        env.step("yes")


def test_single_turn_is_decided_by_max_turns_not_by_the_class():
    env = EchoEnv(extras={"max_turns": 1})  # EchoEnv defaults to 3 turns
    assert env.step("go")["done"] is True  # implicit episode, truncated after its one turn
    with pytest.raises(EnvStateError, match=r"before init\(\); a multi-turn env \(max_turns=2\) needs env.init"):
        EchoEnv(extras={"max_turns": 2}).step("go")


def test_an_init_override_that_never_starts_the_episode_is_named():
    class BrokenInit(CountingEnv):
        def init(self, prompt):
            return prompt, {}

    with pytest.raises(EnvStateError, match=r"BrokenInit.init did not start an episode"):
        BrokenInit().step("x")


def test_closed_env_is_not_restarted_implicitly():
    env = CountingEnv(extras={"reward_spec": {"ground_truth": "yes"}})
    env.close()
    with pytest.raises(EnvStateError, match="after close"):
        env.step("yes")
    assert env.init_prompts == []


def test_a_skyrl_style_env_that_overrides_step_still_runs():
    """SkyRL's env shape: no-argument super().__init__(), its own max_turns and turn counting, `step` overridden."""

    class SkyRLStyle(BaseTextEnv):
        def __init__(self, env_config=None, extras={}):  # noqa: B006 (SkyRL's signature)
            super().__init__()
            self.answer = extras["reward_spec"]["ground_truth"]
            self.max_turns = 2

        def step(self, action):
            self.turns += 1
            done = action == self.answer or self.turns >= self.max_turns
            return {"observations": [], "reward": float(action == self.answer), "done": done, "metadata": {}}

    env = SkyRLStyle({}, {"reward_spec": {"ground_truth": "4"}})
    assert env.step("3") == {"observations": [], "reward": 0.0, "done": False, "metadata": {}}
    assert env.step("4")["reward"] == 1.0 and env.turns == 2
