"""The `code` env: code extraction, ground-truth validation, and rewards from sandboxed stdin/functional tests."""

import json

import pytest

import skyrl_gym
from skyrl_gym.envs.code import CodeEnv, extract_code_block, normalize_output, parse_tests

PROMPT = [{"role": "user", "content": "Solve it."}]
FAST = {"timeout_s": 3.0}

ADD_TESTS = [
    {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
    {"input": "10 -4\n", "output": "6\n", "testtype": "stdin"},
    {"input": "0 0\n", "output": "0\n", "testtype": "stdin"},
]
TWO_SUM_TESTS = [
    {"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]", "testtype": "functional"},
    {"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional"},
    {"input": "[3, 3]\n6", "output": "[0, 1]", "testtype": "functional"},
]


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is my solution.\n```{tag}\n{code}\n```\n"


def make_env(tests, env_config=None, extra_info=None) -> CodeEnv:
    extras = {"reward_spec": {"method": "rule", "ground_truth": tests}, "extra_info": extra_info or {}}
    env = skyrl_gym.make("code", env_config={**FAST, **(env_config or {})}, extras=extras)
    env.init(PROMPT)
    return env


# ----- extraction -------------------------------------------------------------------------------------------------
READINGS = {
    extract_code_block: [
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("```\nprint(2)\n```", "print(2)\n"),
        ("```py\nprint(3)\n```", "print(3)\n"),
        ("first\n```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```\ndone", "print(2)\n"),
        ("```python\nprint(1)\n```\n```text\nnot code\n```", "print(1)\n"),  # other languages are skipped
        ("```python\nprint(1)\n```\n```python\n\n```", "print(1)\n"),  # an empty last block does not count
        ("Solution: ```python\nx = '```'\nprint(x)\n```", "x = '```'\nprint(x)\n"),
        ("no code at all", None),
        ("```python\nprint('never closed')", None),
        ("```cpp\nint main() {}\n```", None),
    ]
}
"""The code block each response yields (None: no runnable block); the conftest parametrizes the test below."""


def test_extract_code_block(reader, given, expected):
    assert reader(given) == expected


def test_normalize_output_ignores_trailing_whitespace_per_line_only():
    assert normalize_output("1 2  \r\n3\t\n\n\n") == "1 2\n3"
    assert normalize_output("  1") == "  1"  # leading spaces still matter
    assert normalize_output("1\n\n2") != normalize_output("1\n2")  # blank lines inside still matter


# ----- ground truth -----------------------------------------------------------------------------------------------
def test_parse_tests_accepts_list_or_json_string_and_decodes_functional_args():
    tests = parse_tests(json.dumps(TWO_SUM_TESTS), default_fn_name="twoSum")
    assert [t.testtype for t in tests] == ["functional"] * 3
    assert tests[0].args == ([2, 7, 11, 15], 9) and tests[0].expected == [0, 1] and tests[0].fn_name == "twoSum"
    stdin = parse_tests(ADD_TESTS)
    assert stdin[1].input == "10 -4\n" and stdin[1].fn_name is None and stdin[1].index == 1


def test_fn_name_on_the_test_wins_over_extra_info():
    tests = parse_tests([{**TWO_SUM_TESTS[0], "fn_name": "solve"}], default_fn_name="twoSum")
    assert tests[0].fn_name == "solve"


@pytest.mark.parametrize(
    "ground_truth, message",
    [
        ("not json", r"ground_truth is a string but not valid JSON"),
        ({"input": "1", "output": "1"}, r"must be a list of tests.*got dict"),
        ([], r"empty list"),
        (["oops"], r"ground_truth\[0\] is str"),
        ([ADD_TESTS[0], {"output": "1", "testtype": "stdin"}], r"ground_truth\[1\] is missing 'input'"),
        ([{"input": 1, "output": "1", "testtype": "stdin"}], r"ground_truth\[0\]\.input is int"),
        ([{"input": "1", "output": "1", "testtype": "interactive"}], r"ground_truth\[0\]\.testtype is 'interactive'"),
        ([TWO_SUM_TESTS[0]], r"ground_truth\[0\]\.fn_name is None"),
        ([{**TWO_SUM_TESTS[0], "fn_name": "two sum"}], r"ground_truth\[0\]\.fn_name is 'two sum'"),
        ([{**TWO_SUM_TESTS[0], "fn_name": "f", "input": "[1,\n2]"}], r"ground_truth\[0\]\.input line 0 is not JSON"),
        ([{**TWO_SUM_TESTS[0], "fn_name": "f", "output": "[0,"}], r"ground_truth\[0\]\.output is not JSON"),
    ],
)
def test_malformed_ground_truth_raises_naming_index_and_field(ground_truth, message):
    with pytest.raises(ValueError, match=message):
        parse_tests(ground_truth)


def test_env_init_validates_ground_truth():
    env = skyrl_gym.make("code", extras={"reward_spec": {"ground_truth": [{"input": "1", "testtype": "stdin"}]}})
    with pytest.raises(ValueError, match=r"ground_truth\[0\] is missing 'output'"):
        env.init(PROMPT)
    with pytest.raises(ValueError, match="needs extras\\['reward_spec'\\]\\['ground_truth'\\]"):
        skyrl_gym.make("code", extras={}).init(PROMPT)


def test_env_config_is_validated():
    with pytest.raises(ValueError, match=r"unknown keys \['timeout'\]"):
        CodeEnv(env_config={"timeout": 3})
    with pytest.raises(ValueError, match="partial_credit"):
        CodeEnv(env_config={"partial_credit": "yes"})
    with pytest.raises(ValueError, match="memory_mb"):
        CodeEnv(env_config={"memory_mb": -1})
    env = CodeEnv(env_config={"partial_credit": True, "timeout_s": 2, "memory_mb": 512, "max_turns": 1})
    assert env.partial_credit and env.limits.timeout_s == 2 and env.limits.memory_mb == 512


def test_no_code_block_gives_zero_without_running_anything():
    env = make_env(ADD_TESTS)
    out = env.step("I think the answer is to add the numbers.")
    assert out["reward"] == 0.0 and out["done"] and out["observations"] == []
    assert out["metadata"]["error"] == "no code block"
    assert out["metadata"]["first_failure"]["kind"] == "no_code_block"
    assert out["metadata"]["tests_passed"] == 0 and out["metadata"]["tests_total"] == 3
    assert env.get_metrics()["code_found"] is False


# ----- rewards from real sandboxed runs ---------------------------------------------------------------------------
ADD_OK = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.mark.integration
def test_correct_stdin_program_gets_full_reward():
    env = make_env(ADD_TESTS)
    out = env.step(fenced(ADD_OK))
    assert out["reward"] == 1.0 and out["done"]
    meta = out["metadata"]
    assert meta["tests_passed"] == meta["tests_total"] == meta["tests_run"] == 3 and meta["first_failure"] is None
    assert "rlimits" in meta["sandbox_layers"]
    metrics = env.get_metrics()
    assert metrics["all_passed"] and metrics["pass_rate"] == 1.0 and metrics["turns"] == 1


@pytest.mark.integration
def test_trailing_whitespace_differences_still_pass():
    env = make_env([{"input": "", "output": "1 2\n3\n", "testtype": "stdin"}])
    assert env.step(fenced("print('1 2   ')\nprint(3)\nprint()\nprint()"))["reward"] == 1.0


@pytest.mark.integration
def test_wrong_answer_stops_at_first_failure_and_explains():
    env = make_env(ADD_TESTS)
    out = env.step(fenced("a, b = map(int, input().split())\nprint(a + b if a != 10 else 0)"))
    meta = out["metadata"]
    assert out["reward"] == 0.0
    assert meta["tests_passed"] == 1 and meta["tests_run"] == 2  # stopped at test 1, test 2 never ran
    failure = meta["first_failure"]
    assert failure["kind"] == "wrong_answer" and failure["test_index"] == 1
    assert "expected: 6" in failure["detail"] and "got: 0" in failure["detail"] and "input: 10 -4" in failure["detail"]


@pytest.mark.integration
def test_runtime_error_reports_last_traceback_lines():
    env = make_env(ADD_TESTS)
    out = env.step(fenced("def parse(s):\n    return int(s)\nprint(parse('x'))"))
    failure = out["metadata"]["first_failure"]
    assert out["reward"] == 0.0 and failure["kind"] == "runtime_error" and failure["test_index"] == 0
    assert "ValueError: invalid literal for int()" in failure["detail"] and "line 2, in parse" in failure["detail"]
    assert len(failure["detail"]) < 1200


@pytest.mark.integration
def test_timeout_and_output_limit_kinds():
    env = make_env(ADD_TESTS, env_config={"timeout_s": 1.0})
    assert env.step(fenced("while True:\n    pass"))["metadata"]["first_failure"]["kind"] == "timeout"
    env = make_env(ADD_TESTS, env_config={"max_output_bytes": 1024})
    flood = env.step(fenced("while True:\n    print('spam' * 100)"))
    assert flood["reward"] == 0.0 and flood["metadata"]["first_failure"]["kind"] == "output_limit"


@pytest.mark.integration
def test_memory_kind():
    env = make_env(ADD_TESTS, env_config={"memory_mb": 200})
    out = env.step(fenced("x = bytearray(3 * 1024 ** 3)"))
    assert out["reward"] == 0.0 and out["metadata"]["first_failure"]["kind"] == "memory"


@pytest.mark.integration
def test_partial_credit_runs_every_test_and_gives_the_fraction():
    env = make_env(ADD_TESTS, env_config={"partial_credit": True})
    out = env.step(fenced("a, b = map(int, input().split())\nprint(a + b if a != 10 else 0)"))
    assert out["reward"] == pytest.approx(2 / 3)
    assert out["metadata"]["tests_run"] == 3 and out["metadata"]["tests_passed"] == 2
    assert env.get_metrics()["pass_rate"] == pytest.approx(2 / 3)
    assert make_env(ADD_TESTS, env_config={"partial_credit": True}).step(fenced(ADD_OK))["reward"] == 1.0


@pytest.mark.integration
def test_functional_tests_with_solution_class_and_tuple_result():
    code = (
        "class Solution:\n"
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"  # List comes from the driver's prelude
        "        print('debugging output is fine')\n"
        "        seen = {}\n"
        "        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n"
        "                return (seen[target - x], i)\n"
        "            seen[x] = i\n"
    )
    env = make_env(TWO_SUM_TESTS, extra_info={"fn_name": "twoSum"})
    out = env.step(fenced(code))
    assert out["reward"] == 1.0, out["metadata"]


@pytest.mark.integration
def test_functional_plain_function_and_wrong_return_value():
    tests = [{"input": '"abc"', "output": '"cba"', "testtype": "functional", "fn_name": "rev"}]
    assert make_env(tests).step(fenced("def rev(s):\n    return s[::-1]"))["reward"] == 1.0
    out = make_env(tests).step(fenced("def rev(s):\n    return s"))
    failure = out["metadata"]["first_failure"]
    assert out["reward"] == 0.0 and failure["kind"] == "wrong_answer" and 'got: "abc"' in failure["detail"]
    missing = make_env(tests).step(fenced("def reverse(s):\n    return s[::-1]"))
    assert missing["metadata"]["first_failure"]["kind"] == "runtime_error"
    assert "neither Solution.rev nor a function rev" in missing["metadata"]["first_failure"]["detail"]


@pytest.mark.integration
def test_functional_prints_cannot_fake_the_result():
    tests = [{"input": "2", "output": "4", "testtype": "functional", "fn_name": "square"}]
    out = make_env(tests).step(fenced("def square(x):\n    print(4)\n    return 5"))
    assert out["reward"] == 0.0 and out["metadata"]["first_failure"]["kind"] == "wrong_answer"


@pytest.mark.integration
def test_mixed_test_types_in_one_problem():
    tests = [
        {"input": "3\n", "output": "9\n", "testtype": "stdin"},
        {"input": "4", "output": "16", "testtype": "functional", "fn_name": "square"},
    ]
    code = "def square(x):\n    return x * x\n\nif __name__ == '__main__':\n    print(square(int(input())))"
    assert make_env(tests).step(fenced(code))["reward"] == 1.0
