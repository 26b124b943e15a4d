"""The `lcb` env: SkyRL's row format, LiveCodeBench's output rule and preamble, on sandboxed runs of our `code` env."""

import json

import pytest

import skyrl_gym
from skyrl_gym.envs.code import LCBEnv, lcb_outputs_match, parse_lcb_tests
from skyrl_gym.envs.code.lcb import LCB_PRELUDE, with_prelude

FAST = {"timeout_s": 3.0}

# SkyRL's own lcb example (second-largest element's 1-based index), stored as SkyRL stores it: a JSON string.
SECOND_LARGEST = json.dumps(
    [
        {"input": "4\n8 2 5 1\n", "output": "3\n", "testtype": "stdin"},
        {"input": "3\n3 2 1\n", "output": "2\n", "testtype": "stdin"},
    ]
)
SECOND_LARGEST_OK = """def main():
    N = int(input())
    A = list(map(int, input().split()))
    B = sorted(A, reverse=True)
    print(A.index(B[1]) + 1)

if __name__ == "__main__":
    main()
"""
# LiveCodeBench functional rows: the problem's metadata (with func_name) copied into each test by SkyRL's preprocessing
TWO_SUM = json.dumps(
    [
        {
            "input": "[2, 7, 11, 15]\n9",
            "output": "[0, 1]",
            "testtype": "functional",
            "metadata": {"func_name": "twoSum"},
        },
        {"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional", "metadata": {"func_name": "twoSum"}},
    ]
)
TWO_SUM_OK = """class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i
"""


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is the program.\n```{tag}\n{code}\n```"


def make(ground_truth, env_config=None, extra_info=None) -> LCBEnv:
    extras = {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}
    if extra_info is not None:
        extras["extra_info"] = extra_info
    return skyrl_gym.make("lcb", env_config={**FAST, **(env_config or {})}, extras=extras)


# ----- LiveCodeBench's stdout rule (pure) ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expected, got, passed",
    [
        ("3\n", "3", True),
        ("1 2\n3\n", "  1 2  \n 3\n\n", True),  # surrounding whitespace of the output and of each line ignored
        ("1.5\n", "1.50\n", True),  # numbers compared as decimals
        ("1 2\n", "1    2\n", True),  # token lists, so spacing between numbers does not matter
        ("1e3\n", "1000\n", True),
        ("0.1\n", "0.10000000001\n", False),  # exact decimals, no tolerance
        ("3\n", "3\n4\n", False),  # line count must match
        ("Yes\n", "yes\n", False),  # text is compared exactly
        ("a  b\n", "a b\n", False),  # non-numeric lines are not token-split
        ("1\n\n2\n", "1\n2\n", False),  # blank lines inside count
        ("nan\n", "nan\n", True),  # equal as text first
        ("nan 1\n", "nan  1\n", False),  # NaN never equals itself as a decimal
    ],
)
def test_lcb_outputs_match_hand_checked(expected, got, passed):
    assert lcb_outputs_match(expected, got) is passed


def test_prelude_is_one_line_and_binds_the_livecodebench_names():
    assert "\n" not in LCB_PRELUDE
    namespace: dict = {}
    exec(LCB_PRELUDE, namespace)
    for name in ("deque", "defaultdict", "Counter", "heappush", "bisect_left", "lru_cache", "sqrt", "gcd", "List"):
        assert name in namespace, name
    assert namespace["bisect"].__name__ == "bisect"  # the module, as in LiveCodeBench's runner
    assert callable(namespace["time"]) and "np" not in namespace and "pd" not in namespace


def test_with_prelude_keeps_future_imports_first():
    assert with_prelude("print(1)") == f"{LCB_PRELUDE}\nprint(1)"
    program = '"""Doc."""\nfrom __future__ import annotations\nx: List[int] = []\n'
    assert (
        with_prelude(program) == f'"""Doc."""\nfrom __future__ import annotations\n{LCB_PRELUDE}\nx: List[int] = []\n'
    )
    compile(with_prelude(program), "main.py", "exec")  # still valid Python
    assert with_prelude("def f(:\n").startswith(LCB_PRELUDE)  # a syntax error stays the program's


# ----- the row format -----------------------------------------------------------------------------------------------
def test_function_name_sources_in_order():
    tests = parse_lcb_tests(TWO_SUM)
    assert [t.fn_name for t in tests] == ["twoSum", "twoSum"] and tests[0].args == ([2, 7, 11, 15], 9)
    as_json_text = [{"input": "1", "output": "1", "testtype": "functional", "metadata": '{"func_name": "f"}'}]
    assert parse_lcb_tests(as_json_text)[0].fn_name == "f"
    only_first = [
        {"input": "1", "output": "1", "testtype": "functional", "metadata": {"func_name": "g"}},
        {"input": "2", "output": "2", "testtype": "functional"},
    ]
    assert [t.fn_name for t in parse_lcb_tests(only_first)] == ["g", "g"]
    own_name_wins = [{"input": "1", "output": "1", "testtype": "functional", "fn_name": "h", "metadata": {}}]
    assert parse_lcb_tests(own_name_wins, default_fn_name="z")[0].fn_name == "h"
    assert parse_lcb_tests([{"input": "1", "output": "1", "testtype": "functional"}], "z")[0].fn_name == "z"


@pytest.mark.parametrize(
    "ground_truth, message",
    [
        ("[{'input': '1'}", r"ground_truth is a string but not valid JSON"),
        ("[]", r"empty list"),
        (
            [{"input": "1", "output": "1", "testtype": "functional", "metadata": "func_name=f"}],
            r"ground_truth\[0\]\.metadata is a string but not JSON",
        ),
        (
            [{"input": "1", "output": "1", "testtype": "functional", "metadata": ["f"]}],
            r"ground_truth\[0\]\.metadata is list; expected a dict",
        ),
        (
            [{"input": "1", "output": "1", "testtype": "functional", "metadata": {}}],
            r"ground_truth\[0\]\.fn_name is None",
        ),
        ([{"input": "1", "output": "1", "testtype": "interactive"}], r"ground_truth\[0\]\.testtype is 'interactive'"),
    ],
)
def test_malformed_rows_raise_naming_the_field(ground_truth, message):
    with pytest.raises(ValueError, match=message):
        parse_lcb_tests(ground_truth)
    with pytest.raises(ValueError, match=message):
        make(ground_truth).step(fenced("print(1)"))  # the implicit init validates the row


def test_skyrl_style_env_config_drops_the_selector_and_refuses_other_unknown_keys_by_name():
    extras = {"reward_spec": {"ground_truth": SECOND_LARGEST}}
    assert skyrl_gym.make("lcb", env_config={"env_class": "lcb"}, extras=extras).env_config == {}
    with pytest.raises(ValueError, match=r"LCBEnv env_config has unknown keys \['timeout'\]"):
        skyrl_gym.make("lcb", env_config={"env_class": "lcb", "timeout": 6}, extras=extras)


def test_no_code_block_scores_zero_without_running():
    env = make(SECOND_LARGEST)
    for response in ("print the index of the second largest", "```python\nprint(3)"):  # no block, unterminated block
        out = env.step(response)
        assert out["reward"] == 0.0 and out["metadata"]["parsed_code"] is None
        assert out["metadata"]["first_failure"]["kind"] == "no_code_block" and out["metadata"]["tests_run"] == 0


# ----- sandboxed runs -----------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_skyrl_examples_without_init():
    """SkyRL's three lcb cases, stepped without init() as SkyRL's test does: right, wrong logic, main() never called."""
    out = make(SECOND_LARGEST).step(fenced(SECOND_LARGEST_OK))
    assert out["reward"] == 1.0 and out["done"] and out["metadata"]["tests_passed"] == 2
    assert out["metadata"]["parsed_code"] == SECOND_LARGEST_OK + "\n"
    largest = (
        "def main():\n    N = int(input())\n    A = list(map(int, input().split()))\n    print(A.index(max(A)) + 1)\n"
    )
    wrong = make(SECOND_LARGEST).step(fenced(largest + "\nmain()"))
    assert wrong["reward"] == 0.0 and wrong["metadata"]["first_failure"]["kind"] == "wrong_answer"
    silent = make(SECOND_LARGEST).step(fenced(SECOND_LARGEST_OK.split("if __name__")[0]))
    failure = silent["metadata"]["first_failure"]
    assert silent["reward"] == 0.0 and failure["kind"] == "wrong_answer" and failure["detail"].endswith("got: ")


@pytest.mark.integration
def test_functional_rows_with_metadata_func_name():
    assert make(TWO_SUM).step(fenced(TWO_SUM_OK))["reward"] == 1.0  # List comes from the preamble
    wrong = make(TWO_SUM).step(fenced(TWO_SUM_OK.replace("[seen[target - x], i]", "[i, seen[target - x]]")))
    assert wrong["reward"] == 0.0 and "expected: [0, 1]" in wrong["metadata"]["first_failure"]["detail"]


@pytest.mark.integration
def test_decimal_output_passes_lcb_but_not_code():
    tests = [{"input": "3\n", "output": "1.5\n", "testtype": "stdin"}]
    program = fenced("n = int(input())\nprint(f'{n / 2:.2f}')")  # prints 1.50
    assert make(tests).step(program)["reward"] == 1.0
    code_env = skyrl_gym.make("code", env_config=FAST, extras={"reward_spec": {"ground_truth": tests}})
    assert code_env.step(program)["reward"] == 0.0


@pytest.mark.integration
def test_preamble_names_need_no_import_under_lcb_only():
    tests = [{"input": "16\n", "output": "4.0\n", "testtype": "stdin"}]
    program = fenced("q = deque([sqrt(int(input()))])\nprint(q.popleft())")
    assert make(tests).step(program)["reward"] == 1.0
    code_env = skyrl_gym.make("code", env_config=FAST, extras={"reward_spec": {"ground_truth": tests}})
    failure = code_env.step(program)["metadata"]["first_failure"]
    assert failure["kind"] == "runtime_error" and "NameError: name 'deque' is not defined" in failure["detail"]
    future = fenced("from __future__ import annotations\nprint(sqrt(int(input())))")
    assert make(tests).step(future)["reward"] == 1.0


@pytest.mark.integration
def test_timeout_and_runtime_error_score_zero():
    slow = make(SECOND_LARGEST, env_config={"timeout_s": 1.0}).step(fenced("while True:\n    pass"))
    assert slow["reward"] == 0.0 and slow["metadata"]["first_failure"]["kind"] == "timeout"
    broken = make(SECOND_LARGEST).step(fenced("def main(:\n    pass"))
    failure = broken["metadata"]["first_failure"]
    assert broken["reward"] == 0.0 and failure["kind"] == "runtime_error" and "SyntaxError" in failure["detail"]


@pytest.mark.integration
def test_partial_credit_is_inherited_from_code():
    program = fenced("n = int(input())\nprint(3)")  # right on the first test only
    assert make(SECOND_LARGEST).step(program)["reward"] == 0.0
    out = make(SECOND_LARGEST, env_config={"partial_credit": True}).step(program)
    assert out["reward"] == 0.5 and out["metadata"]["tests_run"] == 2
