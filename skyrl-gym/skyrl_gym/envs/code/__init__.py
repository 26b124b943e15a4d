"""The `code` environment: LiveCodeBench-style program synthesis rewarded by sandboxed tests."""

from skyrl_gym.envs.code.env import CodeEnv
from skyrl_gym.envs.code.extraction import extract_code_block
from skyrl_gym.envs.code.ground_truth import CodeTest, parse_tests
from skyrl_gym.envs.code.testing import TestOutcome, TestReport, normalize_output, run_tests

__all__ = [
    "CodeEnv",
    "CodeTest",
    "TestOutcome",
    "TestReport",
    "extract_code_block",
    "normalize_output",
    "parse_tests",
    "run_tests",
]
