"""Dataset generation: row contract, determinism, split disjointness, capacity errors, parquet/jsonl and the CLI."""

import json
import random
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic import TASKS
from skyrl_gym.envs.synthetic.base import Problem, SyntheticTask
from skyrl_gym.envs.synthetic.generate import generate_splits, main, read_rows, write_dataset

EXPECTED_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("env_class", pa.string()),
        ("reward_spec", pa.struct([("method", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("difficulty", pa.int64()),
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("question", pa.string()),
                    ("answer", pa.string()),
                ]
            ),
        ),
    ]
)


def _splits(task="arithmetic", train=50, test=10, difficulty=2, seed=0, **kwargs):
    return generate_splits(task, train_size=train, test_size=test, difficulty=difficulty, seed=seed, **kwargs)


def test_rows_follow_the_dataset_contract():
    splits = _splits(train=3, test=2)
    row = splits["train"][1]
    assert set(row) == {"data_source", "prompt", "env_class", "reward_spec", "extra_info"}
    assert row["data_source"] == "synthetic/arithmetic" and row["env_class"] == "arithmetic"
    question = row["extra_info"]["question"]
    assert row["prompt"] == [{"role": "user", "content": question}]
    assert row["reward_spec"] == {"method": "rule", "ground_truth": row["extra_info"]["answer"]}
    assert row["extra_info"]["difficulty"] == 2 and row["extra_info"]["split"] == "train"
    assert [r["extra_info"]["index"] for r in splits["test"]] == [0, 1]
    assert {r["extra_info"]["split"] for r in splits["test"]} == {"test"}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_determinism_disjoint_splits_and_reference_answers_score_one(task):
    first, again, other = _splits(task, seed=3), _splits(task, seed=3), _splits(task, seed=4)
    assert first == again and first != other
    train_q = [r["extra_info"]["question"] for r in first["train"]]
    test_q = [r["extra_info"]["question"] for r in first["test"]]
    assert len(set(train_q)) == 50 and len(set(test_q)) == 10 and not set(train_q) & set(test_q)
    for row in first["train"][:20] + first["test"]:
        env = skyrl_gym.make(row["env_class"], env_config={}, extras={k: v for k, v in row.items() if k != "prompt"})
        env.init(row["prompt"])
        assert env.step(row["extra_info"]["answer"])["reward"] == 1.0


def test_test_split_does_not_depend_on_train_size():
    assert _splits(train=5)["test"] == _splits(train=500)["test"]


def test_sizes_up_to_the_exact_capacity_work_and_one_more_fails():
    full = _splits("arithmetic", train=190, test=10, difficulty=1)  # exactly the 200 distinct problems
    assert len({r["extra_info"]["question"] for r in full["train"] + full["test"]}) == 200
    with pytest.raises(ValueError, match="arithmetic at difficulty 1 has only 200 distinct problems"):
        _splits("arithmetic", train=191, test=10, difficulty=1)
    with pytest.raises(ValueError, match="countdown at difficulty 1 has only 441 distinct problems"):
        _splits("countdown", train=2000, test=200, difficulty=1)


def test_unknown_capacity_stalls_into_a_clear_error():
    def three_problems(rng: random.Random, difficulty: int) -> Problem:
        value = rng.randint(1, 3)
        return Problem(question=str(value), ground_truth=str(value), answer=str(value))

    tiny = SyntheticTask("tiny", three_problems, lambda difficulty: None, str)
    assert len(generate_splits(tiny, train_size=2, test_size=1, difficulty=1, seed=0)["train"]) == 2
    with pytest.raises(ValueError, match="found only 3 distinct problems .* but 4 were asked for"):
        generate_splits(tiny, train_size=3, test_size=1, difficulty=1, seed=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"train": -1}, "train_size must be a non-negative integer"),
        ({"test": 2.5}, "test_size must be a non-negative integer"),
        ({"difficulty": 0}, "difficulty must be an integer"),
        ({"prompt_template": "Q:"}, "prompt_template must contain"),
        ({"task": "algebra"}, "unknown synthetic task"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _splits(**kwargs)


def test_prompt_template_wraps_the_question():
    row = _splits(train=1, test=0, prompt_template="Q: {question}\nA with <answer></answer>.")["train"][0]
    assert row["prompt"][0]["content"] == f"Q: {row['extra_info']['question']}\nA with <answer></answer>."


def test_progress_bar_is_shown_only_when_asked_or_large(capsys):
    _splits(train=20, test=5, progress=True)
    assert "generating arithmetic d2" in capsys.readouterr().err
    _splits(train=20, test=5)
    assert capsys.readouterr().err == ""


def test_cli_writes_parquet_with_the_exact_schema(tmp_path, capsys):
    code = main(["--task", "arithmetic", "--train-size", "40", "--test-size", "8", "--difficulty", "2"]
                + ["--seed", "1", "--out", str(tmp_path)])  # fmt: skip
    assert code == 0 and "wrote 40 train and 8 test rows" in capsys.readouterr().out
    train, test = pq.read_table(tmp_path / "train.parquet"), pq.read_table(tmp_path / "test.parquet")
    assert train.schema.equals(EXPECTED_SCHEMA) and test.schema.equals(EXPECTED_SCHEMA)
    assert train.num_rows == 40 and test.num_rows == 8
    assert train.to_pylist() == _splits(train=40, test=8, seed=1)["train"]


def test_countdown_parquet_round_trip_keeps_structured_ground_truth(tmp_path):
    paths = write_dataset(tmp_path, "countdown", train_size=5, test_size=3, difficulty=2, seed=0)
    gt_type = pq.read_schema(paths["train"]).field("reward_spec").type.field("ground_truth").type
    assert gt_type == pa.struct([("numbers", pa.list_(pa.int64())), ("target", pa.int64())])
    rows = read_rows(paths["test"])
    assert rows == _splits("countdown", train=5, test=3)["test"]


def test_jsonl_format(tmp_path):
    paths = write_dataset(tmp_path, "reverse", train_size=4, test_size=2, difficulty=1, seed=0, fmt="jsonl")
    assert paths["train"].name == "train.jsonl"
    lines = paths["test"].read_text().splitlines()
    assert [json.loads(line) for line in lines] == read_rows(paths["test"]) == _splits("reverse", 4, 2, 1)["test"]
    with pytest.raises(ValueError, match="fmt must be one of"):
        write_dataset(tmp_path, "reverse", train_size=1, test_size=1, difficulty=1, seed=0, fmt="csv")


def test_cli_rejects_impossible_sizes_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--task",
                "reverse",
                "--train-size",
                "4000",
                "--test-size",
                "0",
                "--difficulty",
                "1",
                "--out",
                "/nonexistent",
            ]
        )
    assert exit_info.value.code == 2
    assert "reverse at difficulty 1 has only 3875 distinct problems" in capsys.readouterr().err


@pytest.mark.integration
def test_cli_as_a_module_subprocess(tmp_path):
    cmd = [sys.executable, "-m", "skyrl_gym.envs.synthetic.generate", "--task", "countdown", "--train-size", "30",
           "--test-size", "5", "--difficulty", "3", "--seed", "2", "--out", str(tmp_path), "--format", "jsonl"]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(read_rows(tmp_path / "train.jsonl")) == 30 and len(read_rows(tmp_path / "test.jsonl")) == 5
