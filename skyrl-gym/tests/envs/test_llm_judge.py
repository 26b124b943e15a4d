"""The `llm_as_a_judge` env against real HTTP servers on 127.0.0.1: the demo judge (rule-graded, OpenAI-compatible)
for the verdicts, and a scripted server for the failure paths (retries, errors, replies without a score)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import skyrl_gym
from skyrl_gym import guarded_step
from skyrl_gym.envs.llm_judge.demo_judge import DemoJudge
from skyrl_gym.envs.llm_judge.env import GSM8K_INSTRUCTIONS, JudgeError, judge_message, parse_score


def rule(ground_truth):
    return {"reward_spec": {"method": "rule", "ground_truth": ground_truth}}


@pytest.fixture(scope="module")
def judge():
    with DemoJudge() as server:
        yield server


class ScriptedJudge:
    """A chat-completions server answering each request with the next (status, body) of `script`."""

    def __init__(self, script):
        self.script, self.seen = list(script), []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                return None

            def do_POST(self):  # noqa: N802
                owner.seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status, body = owner.script.pop(0)
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def reply(text):
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}


def make(base_url, **config):
    env = skyrl_gym.make("llm_as_a_judge", env_config={"base_url": base_url, **config}, extras=rule("72"))
    env.backoff_s = 0.0  # no waiting between the attempts of these tests
    return env


def test_the_judges_score_is_the_reward(judge, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "secret")
    env = make(judge.base_url, model="demo-judge", api_key_env="JUDGE_KEY")
    env.init([{"role": "user", "content": "How much?"}])
    out = env.step("8 * 9 = 72\n#### 72")
    assert (out["reward"], out["done"], out["metadata"]) == (1.0, True, {"judge_score": 1.0})
    assert env.get_metrics()["judge_score"] == 1.0
    assert make(judge.base_url).step("#### 71")["reward"] == 0.0
    assert make(judge.base_url).step("seventy-two")["reward"] == 0.0  # no '#### <number>' line
    assert judge.requests[0] == {"model": "demo-judge", "authorization": "Bearer secret"}
    assert judge.requests[1] == {"model": "gpt-4o-mini", "authorization": None}  # no key set: no header


def test_transient_failures_are_retried_and_the_request_carries_gold_and_response():
    server = ScriptedJudge(
        [(503, {"error": "busy"}), (429, {"error": "slow down"}), reply("looks right\n### Final Score: 1")]
    )
    try:
        env = make(server.base_url, max_attempts=3)
        assert env.step("#### 72")["reward"] == 1.0
        assert len(server.seen) == 3
        assert server.seen[-1]["messages"] == [
            {"role": "user", "content": judge_message(GSM8K_INSTRUCTIONS, "72", "#### 72")}
        ]
    finally:
        server.close()


def test_a_failed_judgement_is_a_failed_step_never_a_zero_reward():
    server = ScriptedJudge([(400, {"error": "unknown model"}), reply("I think it is fine."), (200, b"not json")])
    try:
        env = make(server.base_url, max_attempts=3)
        with pytest.raises(JudgeError, match=r"failed after 1 attempt\(s\): HTTP 400"):  # a client error is not retried
            env.step("#### 72")
        guarded = guarded_step(make(server.base_url), "#### 72")
        assert guarded["metadata"]["env_error"]["kind"] == "exception"
        assert "no '### Final Score: 0|1' line" in guarded["metadata"]["env_error"]["reason"]
        with pytest.raises(JudgeError, match="without choices\\[0\\].message.content"):
            make(server.base_url).step("#### 72")
    finally:
        server.close()
    unreachable = make(server.base_url, max_attempts=2, timeout_s=2)
    with pytest.raises(JudgeError, match=r"failed after 2 attempt\(s\): ConnectError"):
        unreachable.step("#### 72")


def test_openais_api_needs_a_key_and_settings_are_checked(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="calls OpenAI's API, which needs a key: set OPENAI_API_KEY"):
        skyrl_gym.make("llm_as_a_judge", env_config={"model": "gpt-4o-mini"}, extras=rule("72"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert make(None).url == "https://api.openai.com/v1/chat/completions"
    for key, value in (("base_url", "localhost:8000"), ("timeout_s", 0), ("max_attempts", 1.5), ("model", "")):
        with pytest.raises(ValueError, match=f"env_config.{key}"):
            make(**{"base_url": "http://127.0.0.1:9/v1", key: value})


def test_parse_score_takes_the_last_score_line_or_a_bare_digit():
    assert parse_score("first ### Final Score: 0 then\n### Final Score: 1") == 1.0
    assert parse_score(" 0 ") == 0.0 and parse_score("### Final Score: 1.0") == 1.0
    assert parse_score("Score: 1") is None and parse_score("### Final Score: 7") is None
