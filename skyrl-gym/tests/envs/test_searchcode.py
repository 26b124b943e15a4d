"""The `searchcode` env against a real BM25 retrieval server on 127.0.0.1 and real sandboxed Python."""

import pytest

from skyrl_gym import EnvStateError, guarded_step
from skyrl_gym.envs.searchcode import SearchCodeEnv, parse_tool_tag
from skyrl_gym.envs.searchcode.env import EMPTY_TOOL_HINT, NO_TOOL_HINT

CORPUS = [
    {"id": "d1", "title": "Eggs", "text": "A hen lays 16 eggs per day."},
    {"id": "d2", "title": "Market", "text": "Duck eggs sell for 2 dollars each at the farmers market."},
    {"id": "d3", "title": "Danube", "text": "The Danube flows through Vienna."},
]
PROMPT = [{"role": "user", "content": "A hen lays eggs sold at the market. How much per day? End with #### N."}]
SEARCH_ENV = ("searchcode", {"topk": 1}, "32")
"""The `make_search_env` fixture's env id, env_config defaults and default ground truth."""


# ----- parsing (pure) -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "action, parsed",
    [
        (
            "<tool><search>how to reverse a string in Python</search></tool>",
            ("search", "how to reverse a string in Python"),
        ),
        ("<tool><python>print('hello')</python></tool>", ("python", "print('hello')")),
        ("think first <tool>\n<python>\nx = 1\nprint(x)\n</python>\n</tool>", ("python", "x = 1\nprint(x)")),
        ("<tool><search>a</search></tool><tool><python>b</python></tool>", ("search", "a")),  # the first block only
        ("<tool><sandbox__python>print(2)</sandbox__python></tool>", ("sandbox__python", "print(2)")),
        ("<tool><browse>x</browse></tool>", ("browse", "x")),  # unknown names are refused when called
    ],
)
def test_parse_tool_tag(action, parsed):
    assert parse_tool_tag(action) == parsed


@pytest.mark.parametrize(
    "action, message",
    [
        ("I will search for it.", NO_TOOL_HINT),
        ("<search>eggs</search>", NO_TOOL_HINT),  # SkyRL's format needs the <tool> wrapper
        ("<tool>search eggs</tool>", EMPTY_TOOL_HINT),
        ("<tool><search>eggs</python></tool>", EMPTY_TOOL_HINT),  # mismatched tags
        ("<tool><search>eggs</search>", NO_TOOL_HINT),  # unclosed <tool>
    ],
)
def test_parse_tool_tag_refusals(action, message):
    with pytest.raises(ValueError) as excinfo:
        parse_tool_tag(action)
    assert str(excinfo.value) == message


# ----- construction -------------------------------------------------------------------------------------------------
def test_defaults_and_config_errors():
    env = SearchCodeEnv({}, {"reward_spec": {"ground_truth": "1"}})
    assert env.max_turns == 2 and env.toolbox.qualified_names() == ["search__search", "sandbox__python"]
    assert env.toolbox.groups[1].limits.timeout_s == 10.0
    assert SearchCodeEnv({"sandbox": {"timeout_s": 2}}, {}).toolbox.groups[1].limits.timeout_s == 2
    with pytest.raises(ValueError, match=r"unknown keys \['env_class'\]"):
        SearchCodeEnv({"env_class": "searchcode"}, {})
    with pytest.raises(ValueError, match="'sandbox' must be a mapping of SandboxLimits fields"):
        SearchCodeEnv({"sandbox": 5}, {})
    with pytest.raises(ValueError, match=r"env_config 'sandbox': unknown keys \['timeout'\]"):
        SearchCodeEnv({"sandbox": {"timeout": 5}}, {})
    with pytest.raises(ValueError, match="topk"):
        SearchCodeEnv({"topk": 0}, {})


def test_ground_truth_must_be_a_number():
    env = SearchCodeEnv({}, {"reward_spec": {"method": "rule", "ground_truth": "random"}})
    with pytest.raises(ValueError, match="reward_spec.ground_truth must be a number"):
        env.init(PROMPT)


def test_step_before_init_is_refused():
    env = SearchCodeEnv({}, {"reward_spec": {"ground_truth": "32"}})
    with pytest.raises(EnvStateError, match=r"before init\(\); a multi-turn env \(max_turns=2\)"):
        env.step("<solution>#### 32</solution>")


# ----- episodes -----------------------------------------------------------------------------------------------------
@pytest.mark.integration
def test_search_then_python_then_solution(server, make_search_env, step_output):
    env = make_search_env(server.url, max_turns=3)
    found = env.step("<tool><search>hen eggs per day</search></tool>")
    assert found["done"] is False and found["reward"] == 0.0
    assert found["observations"] == [{"role": "user", "content": "Doc 1 (Title: Eggs): A hen lays 16 eggs per day."}]
    assert found["metadata"] == {"tool": "search__search", "tool_input": "hen eggs per day"}
    computed = env.step("16 eggs at 2 dollars.\n<tool><python>print(16 * 2)</python></tool>")
    assert computed["observations"] == [{"role": "user", "content": "32"}]
    assert computed["metadata"] == {"tool": "sandbox__python", "tool_input": "print(16 * 2)"}
    final = env.step("<solution>She makes 32 dollars.\n#### 32</solution>")
    assert final == step_output(
        1.0, True, {"solution": "She makes 32 dollars.\n#### 32", "pred": "32", "correct": True}
    )
    assert env.get_metrics() == {
        "turns": 3,
        "episode_reward": 1.0,
        "searches": 1,
        "python_calls": 1,
        "tool_errors": 0,
        "answered": True,
        "correct": True,
    }


@pytest.mark.integration
def test_wrong_and_unformatted_solutions_score_zero(server, make_search_env):
    wrong = make_search_env(server.url).step("<solution>#### 31</solution>")
    assert wrong["done"] and wrong["reward"] == 0.0 and wrong["metadata"]["pred"] == "31"
    bare = make_search_env(server.url).step("<solution>32</solution>")  # strict rule: no `####`, no answer
    assert bare["reward"] == 0.0 and bare["metadata"]["pred"] is None


@pytest.mark.integration
def test_the_last_marker_in_the_models_turns_counts_and_tool_output_never_does(server, make_search_env):
    env = make_search_env(server.url, max_turns=3)
    printed = env.step("First guess #### 30\n<tool><python>print('#' * 4, 16 * 2)</python></tool>")
    assert printed["observations"][0]["content"] == "#### 32"
    final = env.step("<solution>I am not sure.</solution>")  # '#### 32' appeared only in the tool's output
    assert final["reward"] == 0.0 and final["metadata"]["pred"] == "30"
    env = make_search_env(server.url, max_turns=3)
    env.step("First guess #### 30\n<tool><python>print(16 * 2)</python></tool>")
    final = env.step("<solution>#### $32.00</solution>")
    assert final["reward"] == 1.0 and final["metadata"]["pred"] == "32"  # the last `####`, compared as a number


@pytest.mark.integration
def test_last_turn_is_scored_and_runs_no_tool(server, make_search_env):
    env = make_search_env(server.url)  # max_turns 2
    env.step("<tool><python>print(16 * 2)</python></tool>")
    last = env.step("So #### 32 <tool><python>import time; time.sleep(30)</python></tool>")
    assert last["done"] and last["reward"] == 1.0 and last["observations"] == []
    assert last["metadata"] == {"truncated": True, "no_solution": True, "pred": "32", "correct": True}
    assert env.get_metrics()["python_calls"] == 1 and env.get_metrics()["answered"] is False


@pytest.mark.integration
def test_model_mistakes_are_observations(server, make_search_env):
    env = make_search_env(server.url, max_turns=6)
    missing = env.step("Let me think about eggs.")
    assert missing["observations"] == [{"role": "user", "content": NO_TOOL_HINT}]
    assert missing["metadata"] == {"tool_error": NO_TOOL_HINT} and missing["done"] is False
    empty = env.step("<tool>eggs</tool>")
    assert empty["observations"][0]["content"] == EMPTY_TOOL_HINT
    unknown = env.step("<tool><browse>eggs</browse></tool>")
    assert unknown["observations"][0]["content"].startswith("Error: unknown tool 'browse'; available: ")
    assert unknown["metadata"]["tool"] == "browse"
    crash = env.step("<tool><python>print('start')\n1 / 0</python></tool>")
    text = crash["observations"][0]["content"]
    assert text.startswith("Error: the program exited with code 1:\nTraceback") and "ZeroDivisionError" in text
    assert text.endswith("[stdout before the failure]\nstart") and crash["metadata"]["tool_error"] == text[7:]
    blank = env.step("<tool><search>   </search></tool>")
    assert blank["observations"][0]["content"] == "Error: the search query is empty"
    assert env.get_metrics()["tool_errors"] == 5 and env.get_metrics()["searches"] == 1


@pytest.mark.integration
def test_python_time_limit_from_env_config(server, make_search_env):
    env = make_search_env(server.url, sandbox={"timeout_s": 1.0})
    out = env.step("<tool><python>while True:\n    pass</python></tool>")
    assert out["done"] is False
    assert out["observations"][0]["content"] == "Error: the program exceeded the time limit of 1 s"


@pytest.mark.integration
def test_search_server_down_is_a_failed_step_not_a_zero(closed_port_url, make_search_env):
    url = closed_port_url
    env = make_search_env(url, max_attempts=2, backoff_base=0.01)
    out = guarded_step(env, "<tool><search>hen eggs</search></tool>", timeout_s=30)
    assert out["done"] is True and out["reward"] == 0.0 and out["observations"] == []
    error = out["metadata"]["env_error"]
    assert error["kind"] == "tool_unavailable"
    assert error["reason"].startswith(
        f"SearchCodeEnv: the search__search tool failed: search server unavailable at {url}/retrieve after 2 "
        "attempts: ConnectError"
    )
    with pytest.raises(EnvStateError, match="after the episode ended"):
        env.step("<solution>#### 32</solution>")


@pytest.mark.integration
def test_search_server_rejecting_the_request_is_a_failed_step(server, make_search_env):
    env = make_search_env(server.url, topk=500)  # the server allows at most 100
    error = env.step("<tool><search>eggs</search></tool>")["metadata"]["env_error"]
    assert error["kind"] == "tool_unavailable" and "rejected the query (HTTP 422)" in error["reason"]


@pytest.mark.integration
def test_broken_sandbox_is_a_failed_step(server, make_search_env):
    env = make_search_env(server.url, sandbox={"python_executable": "/nonexistent/python3"})
    out = env.step("<tool><python>print(1)</python></tool>")
    assert out["done"] and out["metadata"]["env_error"]["kind"] == "tool_unavailable"
    assert (
        "sandbox__python tool failed: the sandbox could not run the program" in out["metadata"]["env_error"]["reason"]
    )
