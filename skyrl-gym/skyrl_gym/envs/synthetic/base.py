"""Shared pieces of the synthetic task families: the task record, answer extraction, scores and the env base class."""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, TypedDict

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType, final_step
from skyrl_gym.rewards.answer_extraction import END_OF_TURN_MARKERS
from skyrl_gym.tools.parsing import extract_tag

MAX_DIFFICULTY = 10
"""The highest difficulty any family accepts (difficulty 1 is the easiest)."""


class Problem(TypedDict):
    """One generated problem: the question text, the reward ground truth, and a reference answer (a valid response)."""

    question: str
    ground_truth: Any
    answer: str


@dataclass(frozen=True)
class SyntheticTask:
    """A task family: its name (also its env id), a seeded problem generator, a distinct-problem count and a solver.

    `make_problem(rng, difficulty)` must draw everything from `rng`, so a seed fixes the problem.
    `count_problems(difficulty)` returns the exact number of distinct questions, or None when that is too costly to
    compute (the space is then large). `solve(question)` answers from the question text alone.
    """

    name: str
    make_problem: Callable[[random.Random, int], Problem]
    count_problems: Callable[[int], Optional[int]]
    solve: Callable[[str], str]
    description: str = ""

    @property
    def env_class(self) -> str:
        """The registered env id that scores this family."""
        return self.name

    @property
    def data_source(self) -> str:
        """The `data_source` column value of this family's dataset rows."""
        return f"synthetic/{self.name}"


def family_task(module_name: str, description: str) -> SyntheticTask:
    """The task record of a family module, called at its end as `family_task(__name__, description)`: the family is
    named after the module and served by the module's `make_problem`, `count_problems` and `solve`."""
    module = sys.modules[module_name]
    name = module_name.rsplit(".", 1)[-1]
    return SyntheticTask(name, module.make_problem, module.count_problems, module.solve, description)


def check_difficulty(difficulty: Any) -> int:
    """Return `difficulty` if it is an int in [1, MAX_DIFFICULTY]; raise ValueError otherwise."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, int) or not 1 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"difficulty must be an integer from 1 (easiest) to {MAX_DIFFICULTY}, got {difficulty!r}")
    return difficulty


def extract_answer(response: str) -> str:
    """Read the answer from a response: end-of-turn markers removed, then the last `<answer>` tag's content if there
    is one, else the whole stripped response."""
    text = response
    for marker in END_OF_TURN_MARKERS:
        text = text.replace(marker, "")
    tagged = extract_tag(text, "answer")
    return tagged if tagged is not None else text.strip()


@dataclass(frozen=True)
class Score:
    """The verdict on one response: the reward and why it was given."""

    reward: float
    correct: bool
    parsed_answer: str
    parse_error: Optional[str]
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_metadata(self, task: str) -> dict[str, Any]:
        """The step metadata: task, parsed answer, parse error (None when the answer was read), verdict and reason."""
        return {
            "task": task,
            "parsed_answer": self.parsed_answer,
            "parse_error": self.parse_error,
            "correct": self.correct,
            "reason": self.reason,
            **self.details,
        }


def unreadable_answer(answer: str, form: re.Pattern[str], max_chars: int, what: str, kind: str) -> Optional[Score]:
    """The zero score of an answer longer than `max_chars` or not wholly of the form `form` (`what`, e.g. "an
    integer"), the reason reading `no <kind> answer: ...`; None when the answer can be judged."""
    if len(answer) > max_chars:
        error = f"answer has {len(answer)} characters; at most {max_chars} are read"
        return Score(0.0, False, answer[:max_chars], error, f"no {kind} answer: {error}")
    if not form.fullmatch(answer):
        reason = "empty answer" if not answer else f"{answer!r} is not {what}"
        return Score(0.0, False, answer, reason, f"no {kind} answer: {reason}")
    return None


def exact_verdict(answer: str, shown: str, correct: bool, truth: Any) -> Score:
    """1.0 for a right answer and 0.0 for a wrong one (naming `truth`), the answer written as `shown` in the reason."""
    if correct:
        return Score(1.0, True, answer, None, f"{shown} is correct")
    return Score(0.0, False, answer, None, f"{shown} is wrong; expected {truth}")


class SyntheticEnv(BaseTextEnv):
    """Single-turn env base for the synthetic families: reads and checks the ground truth at `init`, scores the one
    response with the family's rule and ends the episode.

    A family's env subclasses it as `class XEnv(SyntheticEnv, family=__name__)`, which sets `task_name` to the module's
    name and takes the module's `parse_ground_truth` and `score_response` as the rule (`__init_subclass__`); a subclass
    of such an env may override `task_name` alone. An env_config knob of the rule is read by `read_score_options` into
    `score_options`, the keyword arguments `score_response` is called with.
    """

    config_keys = ()

    task_name: ClassVar[str] = ""
    parse_ground_truth: ClassVar[Callable[[Any], Any]]
    """Check `reward_spec.ground_truth` and return it in the form `score_response` uses (ValueError if malformed)."""
    score_response: ClassVar[Callable[..., Score]]
    """`score_response(response, truth, **score_options)`: the family's scoring rule."""
    nonblocking = True  # parsing and scoring a short string: pure Python, microseconds a call

    def __init_subclass__(cls, family: Optional[str] = None, **kwargs: Any) -> None:
        """With `family` (a family module's `__name__`), take that module's name and scoring rule (see above)."""
        super().__init_subclass__(**kwargs)
        if family is not None:
            module = sys.modules[family]
            cls.task_name = family.rsplit(".", 1)[-1]
            cls.parse_ground_truth = staticmethod(module.parse_ground_truth)
            cls.score_response = staticmethod(module.score_response)

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        self.score_options: dict[str, Any] = self.read_score_options()
        self._truth: Any = None
        self._last_score: Optional[Score] = None

    def read_score_options(self) -> dict[str, Any]:
        """The rule's keyword arguments from `env_config` (checked; ValueError naming the key); none by default."""
        return {}

    def score(self, response: str, truth: Any) -> Score:
        """Score one response against the parsed ground truth with the family's rule and this env's options."""
        return self.score_response(response, truth, **self.score_options)

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode; raises ValueError when the row's ground truth is missing or malformed."""
        self._truth = self.parse_ground_truth(self.ground_truth())
        self._last_score = None
        return super().init(prompt)

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        result = self.score(action, self._truth)
        self._last_score = result
        return final_step(result.reward, result.to_metadata(self.task_name))

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus `correct` and `parse_error` (1 when the answer could not be read or was invalid)."""
        metrics = super().get_metrics()
        if self._last_score is not None:
            metrics["correct"] = self._last_score.correct
            metrics["parse_error"] = self._last_score.parse_error is not None
        return metrics


def ground_truth_error(task: str, expected: str, value: Any) -> ValueError:
    """A ValueError naming `reward_spec.ground_truth`, what the family expects, and what it got."""
    return ValueError(f"{task}: reward_spec.ground_truth must be {expected}; got {value!r}")
