"""Answer extraction, difficulty checks, seeding and the task table shared by the synthetic families."""

import random

import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic import MAX_DIFFICULTY, TASKS, get_task
from skyrl_gym.envs.synthetic.base import check_difficulty, extract_answer


@pytest.mark.parametrize(
    "response, expected",
    [
        ("42", "42"),
        ("  42 \n", "42"),
        ("42<|im_end|>", "42"),
        ("42</s>", "42"),
        ("<answer>42</answer>", "42"),
        ("<answer> 42 </answer><|im_end|>", "42"),
        ("<answer>1</answer> then <answer>2</answer>", "2"),  # the last tag wins
        ("think <answer>7</answer> trailing", "7"),
        ("<answer>7", "<answer>7"),  # an unclosed tag is not an answer tag
        ("<|im_end|>", ""),
        ("", ""),
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize("bad", [0, -1, MAX_DIFFICULTY + 1, 1.0, "2", True, None])
def test_check_difficulty_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="difficulty must be an integer"):
        check_difficulty(bad)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_seed_fixes_the_problems_and_another_seed_changes_them(name):
    def draw(seed):
        rng = random.Random(seed)
        return [TASKS[name].make_problem(rng, 3) for _ in range(200)]

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)


def test_task_table_matches_registered_env_ids():
    assert sorted(TASKS) == ["addition", "arithmetic", "countdown", "reverse"]
    for name, task in TASKS.items():
        assert task.env_class == name and task.data_source == f"synthetic/{name}"
        assert skyrl_gym.spec(name).load().task_name == name
    with pytest.raises(ValueError, match="unknown synthetic task 'arith'"):
        get_task("arith")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_env_metrics_and_metadata_after_one_step(name):
    task = TASKS[name]
    import random

    problem = task.make_problem(random.Random(5), 2)
    extras = {"reward_spec": {"method": "rule", "ground_truth": problem["ground_truth"]}, "max_turns": 3}
    env = skyrl_gym.make(name, env_config={}, extras=extras)
    env.init([{"role": "user", "content": problem["question"]}])
    output = env.step("<answer>" + problem["answer"] + "</answer><|im_end|>")
    assert output["done"] is True and output["reward"] == 1.0 and output["observations"] == []
    assert output["metadata"]["task"] == name and output["metadata"]["parse_error"] is None
    assert output["metadata"]["parsed_answer"] == problem["answer"]
    metrics = env.get_metrics()
    assert metrics["correct"] is True and metrics["parse_error"] is False and metrics["turns"] == 1
    env.init([{"role": "user", "content": problem["question"]}])  # a new episode resets the verdict
    assert "correct" not in env.get_metrics()
    assert env.step("")["reward"] == 0.0
    assert env.get_metrics()["correct"] is False


@pytest.mark.parametrize("name", sorted(TASKS))
def test_missing_ground_truth_is_a_clear_value_error(name):
    env = skyrl_gym.make(name, env_config={}, extras={"reward_spec": {"method": "rule"}})
    with pytest.raises(ValueError, match="ground_truth"):
        env.init([{"role": "user", "content": "x"}])
