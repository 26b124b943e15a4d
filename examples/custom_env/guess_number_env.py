"""A user's own multi-turn environment: guess a hidden integer with higher/lower hints.

It lives in the user's module, subclasses `skyrl_gym.BaseTextEnv`, and is registered at run time with
`register_env()`; nothing in skyrl-gym is edited. Dataset rows give the hidden number as
`reward_spec.ground_truth` and the range in `extra_info`.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import skyrl_gym
from skyrl_gym import BaseTextEnv, BaseTextEnvStepOutput

ENV_ID = "guess_number"
_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>")


class GuessNumberEnv(BaseTextEnv):
    """Each turn the model writes `<guess>N</guess>`; the env answers "higher" or "lower" until it is right.

    Reward: 1.0 for the correct guess minus `turn_penalty` for every earlier turn (never below 0); a turn without a
    well-formed guess gets a hint about the format and reward 0.
    """

    default_max_turns = 6

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        target = self.ground_truth()
        if isinstance(target, bool) or not isinstance(target, int):
            raise ValueError(f"reward_spec.ground_truth must be the hidden integer, got {target!r}")
        self.target = target
        self.turn_penalty = float(self.env_config.get("turn_penalty", 0.1))
        self.guesses: list[int] = []

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        match = _GUESS.search(action)
        if match is None:
            hint = "Answer with <guess>N</guess>, where N is an integer."
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": hint}],
                reward=0.0,
                done=False,
                metadata={"parsed": None},
                postprocessed_action=None,
            )
        guess = int(match.group(1))
        self.guesses.append(guess)
        if guess == self.target:
            reward = max(0.0, 1.0 - self.turn_penalty * (self.turns - 1))
            return BaseTextEnvStepOutput(
                observations=[], reward=reward, done=True, metadata={"parsed": guess}, postprocessed_action=None
            )
        direction = "higher" if guess < self.target else "lower"
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": f"{guess} is wrong; go {direction}."}],
            reward=0.0,
            done=False,
            metadata={"parsed": guess},
            postprocessed_action=None,
        )

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics: the base tallies plus whether the number was found."""
        return {**super().get_metrics(), "solved": self.target in self.guesses}


def register_env() -> None:
    """Register `guess_number` with skyrl-gym (safe to call more than once)."""
    if ENV_ID not in skyrl_gym.registry:
        skyrl_gym.register(ENV_ID, GuessNumberEnv)


def make_row(target: int, low: int = 1, high: int = 100) -> dict[str, Any]:
    """A dataset row in the project's schema for one hidden number."""
    question = f"I am thinking of an integer between {low} and {high}. Guess it: reply <guess>N</guess>."
    return {
        "data_source": "custom/guess_number",
        "prompt": [{"role": "user", "content": question}],
        "env_class": ENV_ID,
        "reward_spec": {"method": "rule", "ground_truth": target},
        "extra_info": {"low": low, "high": high},
    }


def binary_search_policy(low: int, high: int):
    """A scripted player that halves the range each turn; returns a function from observation text to action."""
    bounds = {"low": low, "high": high, "last": None}

    def act(observation: str) -> str:
        if bounds["last"] is not None:
            if "higher" in observation:
                bounds["low"] = bounds["last"] + 1
            elif "lower" in observation:
                bounds["high"] = bounds["last"] - 1
        bounds["last"] = (bounds["low"] + bounds["high"]) // 2
        return f"<guess>{bounds['last']}</guess>"

    return act


if __name__ == "__main__":
    register_env()
    row = make_row(target=37)
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    with skyrl_gym.make(row["env_class"], env_config={"turn_penalty": 0.1}, extras=extras) as env:
        messages, _ = env.init(row["prompt"])
        player = binary_search_policy(1, 100)
        observation = messages[-1]["content"]
        while True:
            action = player(observation)
            out = env.step(action)
            print(f"turn {env.turns}: {action} -> reward {out['reward']:.2f}")
            if out["done"]:
                break
            observation = out["observations"][-1]["content"]
        print("metrics:", env.get_metrics())
