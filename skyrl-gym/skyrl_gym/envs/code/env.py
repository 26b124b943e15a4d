"""`CodeEnv`: a single-turn LiveCodeBench-style coding environment that runs the answer's code in the sandbox."""

from __future__ import annotations

import math
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType, final_step
from skyrl_gym.envs.code.extraction import extract_code_block
from skyrl_gym.envs.code.ground_truth import CodeTest, parse_tests
from skyrl_gym.envs.code.testing import NO_CODE_BLOCK, TestReport, run_tests
from skyrl_gym.sandbox import SandboxLimits

ENV_KEYS = ("partial_credit", "max_turns", "total_timeout_s")


class CodeEnv(BaseTextEnv):
    """Reward a program against hidden tests, LiveCodeBench style.

    The model answers once; the last ```python (or untagged) fenced block is the program. Tests come from
    `reward_spec.ground_truth` (see `parse_tests`): stdin tests compare stdout per line, functional tests call
    `fn_name` with JSON arguments. Each test runs in a fresh sandbox (`skyrl_gym.sandbox`).

    Reward: 1.0 iff every test passes, else 0.0; with `env_config["partial_credit"] = True`, the fraction passed
    (and every test is run instead of stopping at the first failure).

    env_config keys: `partial_credit` (bool), `total_timeout_s` (budget for all tests of one answer), `max_turns`,
    and any `SandboxLimits` field (`timeout_s`, `memory_mb`, `max_output_bytes`, ...). Unknown keys are an error.
    """

    def __init__(self, env_config: Optional[dict[str, Any]] = None, extras: Optional[dict[str, Any]] = None) -> None:
        super().__init__(env_config, extras)
        name = type(self).__name__
        config = dict(self.env_config)
        unknown = sorted(set(config) - set(ENV_KEYS) - set(SandboxLimits.field_names()))
        if unknown:
            raise ValueError(
                f"{name} env_config has unknown keys {unknown}; allowed: {list(ENV_KEYS)} and the SandboxLimits "
                f"fields {list(SandboxLimits.field_names())}"
            )
        partial = config.pop("partial_credit", False)
        if not isinstance(partial, bool):
            raise ValueError(f"{name} env_config 'partial_credit' must be true or false, got {partial!r}")
        self.partial_credit: bool = partial
        budget = config.pop("total_timeout_s", None)
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0):
            raise ValueError(f"{name} env_config 'total_timeout_s' must be a positive number, got {budget!r}")
        self.total_timeout_s: Optional[float] = budget
        config.pop("max_turns", None)
        self.limits: SandboxLimits = SandboxLimits.from_mapping(config, where=f"{name} env_config")
        self.tests: list[CodeTest] = []
        self.report: Optional[TestReport] = None
        self.program: Optional[str] = None
        self.code_found = False

    def _default_fn_name(self) -> Optional[str]:
        extra_info = self.extras.get("extra_info") or {}
        if not isinstance(extra_info, dict):
            return None
        return extra_info.get("fn_name")

    def _parse_tests(self) -> list[CodeTest]:
        """The row's tests from `reward_spec.ground_truth` (ValueError naming the bad test and field)."""
        return parse_tests(self.ground_truth(), default_fn_name=self._default_fn_name())

    def _run_tests(self, program: str) -> TestReport:
        """Run the extracted program against the episode's tests in the sandbox."""
        return run_tests(
            program,
            self.tests,
            self.limits,
            stop_at_first_failure=not self.partial_credit,
            total_timeout_s=self.total_timeout_s,
        )

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start an episode: validate the ground-truth tests (ValueError on malformed ones) and return the prompt."""
        self._begin_episode()
        self.tests = self._parse_tests()
        self.report = None
        self.program = None
        self.code_found = False
        return prompt, {}

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        program = extract_code_block(action)
        self.program = program
        self.code_found = program is not None
        if program is None:
            self.report = TestReport(total=len(self.tests))
            metadata = self.report.to_metadata()
            metadata["first_failure"] = {
                "test_index": None,
                "kind": NO_CODE_BLOCK,
                "detail": "no code block: the response has no ```python fenced block",
            }
            metadata["error"] = "no code block"
            return final_step(0.0, metadata)
        self.report = self._run_tests(program)
        reward = self.report.reward(self.partial_credit)
        return final_step(reward, self.report.to_metadata())

    def get_metrics(self) -> dict[str, Any]:
        """Base metrics plus `code_found`, `tests_passed`, `tests_total`, `pass_rate` and `all_passed`."""
        metrics = super().get_metrics()
        total = self.report.total if self.report else len(self.tests)
        passed = self.report.passed if self.report else 0
        metrics.update(
            code_found=self.code_found,
            tests_passed=passed,
            tests_total=total,
            pass_rate=passed / total if total else math.nan,
            all_passed=bool(total) and passed == total,
        )
        return metrics
