"""The `code` and `lcb` environments: LiveCodeBench-style program synthesis rewarded by sandboxed tests."""

from skyrl_gym.envs.code.env import CodeEnv
from skyrl_gym.envs.code.extraction import extract_code_block
from skyrl_gym.envs.code.ground_truth import CodeTest, parse_tests
from skyrl_gym.envs.code.lcb import LCBEnv, lcb_outputs_match, parse_lcb_tests
from skyrl_gym.envs.code.testing import TestOutcome, TestReport, normalize_output, outputs_match, run_tests

__all__ = [
    "CodeEnv",
    "CodeTest",
    "LCBEnv",
    "TestOutcome",
    "TestReport",
    "extract_code_block",
    "lcb_outputs_match",
    "normalize_output",
    "outputs_match",
    "parse_lcb_tests",
    "parse_tests",
    "run_tests",
]
