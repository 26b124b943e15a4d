"""The `mini_swe_agent` workflow: mini-swe-agent's DefaultAgent on SWE task instances with the local environment.

The agent, its parsing, the shell commands, git, the patch and the eval script run for real; only the model's text is
chosen by the test (`ScriptedEngines`, standing in for the run's engines, which the CPU example drives for real).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("minisweagent", reason="needs mini-swe-agent: pip install -e './skyrl-agent[miniswe]'")

from skyrl_agent.mini_swe_agent import (  # noqa: E402
    ENV_CLASS,
    MiniSweAgentWorkflow,
    docker_image_name,
    evaluate_patch,
    local_task_rows,
    make_local_repo,
)
from skyrl_agent.tasks.mini_swe import build_repo  # noqa: E402
from skyrl_train.generators.chat import prompt_token_ids  # noqa: E402
from skyrl_train.generators.skyrl_gym_generator import GeneratorSettings  # noqa: E402
from skyrl_train.generators.types import GeneratorInput  # noqa: E402
from skyrl_train.generators.workflow import WorkflowGenerator  # noqa: E402
from skyrl_train.inference.types import InferenceEngineOutput, SamplingParams  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "train" / "mini_swe_agent" / "local.yaml"
SUBMIT = "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached\n```"
LOGPROB, VERSION = -0.5, 3
ENGINE_DIES = "<the engine raises>"


class ScriptedEngines:
    """The run's engines as the workflow sees them: each turn answers with the next scripted text, tokenized and
    ending in eos (cut to `max_tokens`), every logprob `LOGPROB`, weight version `VERSION`; `prompts` keeps each
    turn's context and `budgets` its length plus `max_tokens`."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.prompts, self.budgets = tokenizer, list(turns), [], []

    async def generate(self, request):
        self.prompts.append(list(request.prompt_token_ids[0]))
        text = self.turns.pop(0) if self.turns else "no command"
        if text == ENGINE_DIES:
            raise RuntimeError("the engine died")
        ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [self.tokenizer.eos_token_id]
        ids = ids[: request.sampling_params.max_tokens]
        self.budgets.append(len(request.prompt_token_ids[0]) + request.sampling_params.max_tokens)
        return InferenceEngineOutput([text], [ids], ["stop"], [[LOGPROB] * len(ids)], weight_version=VERSION)


def fixed_module(seed: int) -> str:
    """The seed's first mini_swe repository's module with the reference fix applied."""
    from skyrl_agent.tasks.mini_swe import MODULE

    repo = build_repo(random.Random(f"mini_swe/train/{seed}"), 0)
    fix = repo["reference_fix"]
    return repo["files"][MODULE].replace(fix["old"], fix["new"])


def config_with_step_limit(tmp_path: Path, step_limit: int) -> str:
    """The CPU example's mini-swe-agent config with another step limit."""
    config = yaml.safe_load(CONFIG.read_text())
    config["agent"]["step_limit"] = step_limit
    path = tmp_path / f"local-{step_limit}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def run(tokenizer, turns: list[str], tmp_path: Path, n: int = 1, max_input_length: int = 20000, max_tokens: int = 600):
    row = local_task_rows(1, seed=1)[0]
    engines = ScriptedEngines(tokenizer, turns)
    params = SamplingParams(max_tokens=max_tokens)
    settings = GeneratorSettings(sampling_params=params, max_turns=4, max_input_length=max_input_length)
    workflow = MiniSweAgentWorkflow(config_with_step_limit(tmp_path, 6), traj_dir=str(tmp_path / "trajs"))
    generator = WorkflowGenerator(workflow, engines, tokenizer, settings)
    batch = GeneratorInput(
        prompts=[row["prompt"]] * n,
        env_classes=[row["env_class"]] * n,
        env_extras=[{"instance": row["instance"], "data_source": row["data_source"]}] * n,
        uids=["u0"] * n,
    )
    return asyncio.run(generator.generate(batch)).trajectories, engines, row


def test_an_agent_that_fixes_the_bug_and_submits_scores_1_with_its_tokens_as_sampled(tokenizer, tmp_path):
    edit = f"THOUGHT: rewrite it\n\n```bash\ncat > utils.py <<'EOF'\n{fixed_module(1)}EOF\n```"
    turns = ["THOUGHT: look\n\n```bash\ncat utils.py\n```", edit, "THOUGHT: done\n\n" + SUBMIT]
    (trajectory,), engines, row = run(tokenizer, turns, tmp_path)
    assert trajectory.token_rewards[-1] == 1.0 and trajectory.stop_reason == "stop" and trajectory.num_turns == 3
    assert trajectory.env_class == ENV_CLASS and trajectory.data_source == "skyrl_agent/mini_swe_local"
    # token in, token out: each turn's context is the previous context, the turn as sampled and the observation
    assert engines.prompts[0] == trajectory.prompt_token_ids
    system, task = json.loads(next((tmp_path / "trajs").rglob("*.json")).read_text())["messages"][:2]
    assert trajectory.prompt_token_ids == prompt_token_ids(
        tokenizer, [{"role": m["role"], "content": m["content"]} for m in (system, task)]
    )
    full = trajectory.prompt_token_ids + trajectory.response_ids
    for earlier, later in zip(engines.prompts, engines.prompts[1:]):
        assert later[: len(earlier)] == earlier and full[: len(later)] == later
    generated = [i for i, m in enumerate(trajectory.loss_mask) if m]
    text = tokenizer.decode([trajectory.response_ids[i] for i in generated], skip_special_tokens=True)
    assert text == "".join(turns)
    assert all(trajectory.rollout_logprobs[i] == LOGPROB for i in generated)
    assert all(trajectory.token_versions[i] == VERSION for i in generated) and trajectory.weight_version == VERSION
    observations = tokenizer.decode([t for t, m in zip(trajectory.response_ids, trajectory.loss_mask) if not m])
    assert "def " in observations and "turns left" in observations  # `cat`'s output and the reminder, masked


def test_a_wrong_fix_scores_0_and_an_unsubmitted_run_stops_at_the_step_limit(tokenizer, tmp_path):
    wrong = "```bash\necho 'def broken(' >> utils.py\n```"
    (trajectory,), _, _ = run(tokenizer, [wrong, SUBMIT], tmp_path)
    assert trajectory.token_rewards[-1] == 0.0 and trajectory.stop_reason == "stop"
    (trajectory,), engines, _ = run(tokenizer, ["```bash\nls\n```"] * 10, tmp_path)
    assert sum(trajectory.token_rewards) == 0.0 and trajectory.num_turns == 6 == len(engines.prompts)
    assert trajectory.stop_reason == "stop" and trajectory.env_metrics["agent_stop_LimitsExceeded"] == 1.0


def test_a_full_context_ends_the_agent_and_is_cut_by_length(tokenizer, tmp_path):
    (trajectory,), engines, _ = run(tokenizer, ["```bash\nls\n```"] * 10, tmp_path, max_input_length=700)
    assert 1 <= trajectory.num_turns < 6 and trajectory.stop_reason == "length"
    assert trajectory.env_metrics["agent_stop_context_overflow"] == 1.0
    assert max(engines.budgets) <= 700  # no turn may sample past the context


def test_a_turn_cut_by_max_tokens_is_closed_with_eos_before_the_observation(tokenizer, tmp_path):
    (trajectory,), engines, _ = run(tokenizer, ["a long reply without a block"] * 2, tmp_path, max_tokens=5)
    first = len(engines.prompts[0])
    assert engines.prompts[1][first : first + 5] == tokenizer.encode("a lon", add_special_tokens=False)
    assert engines.prompts[1][first + 5] == tokenizer.eos_token_id  # not sampled: loss-masked
    assert trajectory.loss_mask[:6] == [1] * 5 + [0]


def test_a_reply_without_one_bash_block_gets_the_format_error_and_the_agent_goes_on(tokenizer, tmp_path):
    (trajectory,), engines, _ = run(tokenizer, ["no block here", SUBMIT], tmp_path)
    assert trajectory.num_turns == 2
    observation = tokenizer.decode(engines.prompts[1][len(engines.prompts[0]) :])
    assert "Found 0 bash blocks" in observation


def patch_of(instance: dict, module: str) -> str:
    """The git diff that turns the instance's utils.py into `module`."""
    root = make_local_repo(instance)
    try:
        Path(root, "utils.py").write_text(module)
        return subprocess.run(["git", "diff"], cwd=root, capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(root)


def test_the_patch_is_judged_in_a_fresh_repository_by_the_eval_script():
    instance = local_task_rows(1, seed=1)[0]["instance"]
    config = {"environment": {"environment_class": "local", "timeout": 20}}
    assert evaluate_patch(config, instance, "", patch_of(instance, fixed_module(1))) == (True, None)
    resolved, error = evaluate_patch(config, instance, "", patch_of(instance, "def nothing():\n    pass\n"))
    assert not resolved and "the eval script exited 1" in error and "ImportError" in error
    resolved, error = evaluate_patch(config, instance, "", "not a patch")
    assert not resolved and error.startswith("git apply failed")


def test_instances_name_their_container_image():
    assert docker_image_name({"instance_id": "a__b-1", "image_name": "img:1"}, "any") == "img:1"
    assert docker_image_name({"instance_id": "Org__Repo-12"}, "SumanthRH/SWE-Gym-Subset") == (
        "docker.io/xingyaoww/sweb.eval.x86_64.org_s_repo-12:latest"
    )
    assert docker_image_name({"instance_id": "a__b-1"}, "princeton/SWE-bench_Verified").endswith("a_1776_b-1:latest")
    with pytest.raises(ValueError, match="neither SWE-Gym nor SWE-bench"):
        docker_image_name({"instance_id": "x"}, "mine")


def test_rows_that_are_not_swe_instances_are_refused_by_row_and_field(tokenizer, tmp_path):
    row = local_task_rows(1)[0]
    workflow = MiniSweAgentWorkflow(str(CONFIG))
    generator = WorkflowGenerator(workflow, ScriptedEngines(tokenizer, []), tokenizer, GeneratorSettings())
    instance = {k: v for k, v in row["instance"].items() if k != "eval_script"}
    batch = GeneratorInput(
        prompts=[row["prompt"]], env_classes=[ENV_CLASS], env_extras=[{"instance": instance}], uids=["r7"]
    )
    with pytest.raises(ValueError, match="uid='r7'.*'eval_script'"):
        asyncio.run(generator.generate(batch))


def test_an_environment_that_cannot_start_leaves_an_invalid_trajectory_with_the_reason(tokenizer, tmp_path):
    """No container runtime here (mocked by nothing: the executable does not exist), so the container path fails
    the way a missing image or daemon does on a GPU machine: the trajectory has no tokens and says why."""
    config = yaml.safe_load(CONFIG.read_text())
    config["environment"] = {"environment_class": "docker", "executable": str(tmp_path / "no-docker")}
    path = tmp_path / "docker.yaml"
    path.write_text(yaml.safe_dump(config))
    row = local_task_rows(1)[0]
    generator = WorkflowGenerator(
        MiniSweAgentWorkflow(str(path)), ScriptedEngines(tokenizer, [SUBMIT]), tokenizer, GeneratorSettings()
    )
    extras = {"instance": {**row["instance"], "image_name": "sweb.eval:latest"}, "data_source": "local"}
    batch = GeneratorInput(prompts=[row["prompt"]], env_classes=[ENV_CLASS], env_extras=[extras], uids=["d0"])
    (trajectory,) = asyncio.run(generator.generate(batch)).trajectories
    assert not trajectory.is_valid and trajectory.response_ids == []
    assert trajectory.prompt_token_ids == prompt_token_ids(tokenizer, row["prompt"])
    assert "no-docker" in trajectory.env_error["detail"]


def test_an_engine_failing_mid_trajectory_keeps_it_out_of_training(tokenizer, tmp_path):
    (trajectory,), engines, _ = run(tokenizer, ["```bash\nls\n```", ENGINE_DIES], tmp_path)
    assert trajectory.num_turns == 1 and sum(trajectory.loss_mask) > 0
    assert not trajectory.is_valid and trajectory.env_error == {
        "reason": "error",
        "detail": "RuntimeError: the engine died",
    }


def test_repo_files_must_stay_inside_the_repository():
    instance = {"instance_id": "x", "repo_files": {"../escape.py": "x = 1\n"}}
    with pytest.raises(ValueError, match="'../escape.py' is outside the repository"):
        make_local_repo(instance)
    with pytest.raises(ValueError, match="needs the instance's repo_files"):
        make_local_repo({"instance_id": "x"})
