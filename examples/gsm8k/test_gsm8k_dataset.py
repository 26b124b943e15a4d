"""The GSM8K converter: the shipped sample becomes rows that load, fit the contract and score through the env."""

import json
import os
import subprocess
import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gsm8k_dataset import INSTRUCTION, SAMPLE_FILE, convert_records, final_answer, main, read_jsonl_records

import skyrl_gym
from skyrl_train.dataset import PromptDataset, read_file
from skyrl_train.models.tokenizer import build_char_tokenizer


def sample_records():
    return [json.loads(line) for line in SAMPLE_FILE.read_text().splitlines()]


def test_the_shipped_sample_converts_to_rows_of_the_contract(tmp_path, capsys):
    assert main(["--input", str(SAMPLE_FILE), "--output-dir", str(tmp_path)]) == 0
    assert "wrote 20 train rows to" in capsys.readouterr().out
    rows = read_file(tmp_path / "train.parquet")
    assert len(rows) == 20
    first = sample_records()[0]
    assert rows[0] == {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": first["question"] + "\n\n" + INSTRUCTION}],
        "env_class": "gsm8k",
        "reward_spec": {"method": "rule", "ground_truth": "27"},
        "extra_info": {"split": "train", "index": 0, "question": first["question"], "answer": first["answer"]},
    }
    # the temperature problem (row 15) ends with "#### -6"
    assert rows[15]["reward_spec"]["ground_truth"] == "-6"


def test_converted_rows_load_and_the_original_answers_score_one(tmp_path):
    main(["--input", str(SAMPLE_FILE), "--output-dir", str(tmp_path), "--split", "test"])
    dataset = PromptDataset([tmp_path / "test.parquet"], build_char_tokenizer(), max_prompt_length=512)
    assert len(dataset) == 20 and dataset.num_too_long == 0
    rewards = []
    for index in range(len(dataset)):
        item = dataset[index]
        env = skyrl_gym.make(item["env_class"], extras=item["env_extras"])
        env.init(item["prompt"])
        rewards.append(env.step(item["env_extras"]["extra_info"]["answer"])["reward"])
    assert rewards == [1.0] * 20
    assert item["env_extras"]["extra_info"]["split"] == "test"


def test_multi_turn_rows_get_a_second_attempt_after_a_wrong_answer(tmp_path):
    main(["--input", str(SAMPLE_FILE), "--output-dir", str(tmp_path), "--env-class", "gsm8k_multi_turn"])
    row = read_file(tmp_path / "train.parquet")[0]
    assert row["env_class"] == "gsm8k_multi_turn"
    env = skyrl_gym.make(row["env_class"], extras={**row, "max_turns": 2})
    env.init(row["prompt"])
    wrong = env.step("#### 26")
    assert not wrong["done"] and "incorrect" in wrong["observations"][0]["content"]
    assert env.step("#### 27")["reward"] == 1.0


def test_bad_rows_are_reported_with_their_line_number_and_skipped(tmp_path, capsys):
    good = sample_records()[0]
    lines = [
        json.dumps(good),
        "{not json",
        "",
        json.dumps({"answer": good["answer"]}),
        json.dumps({"question": "Q?", "answer": "It is 4."}),
        json.dumps({"question": "Q?", "answer": "So\n#### four"}),
        json.dumps(["Q?", "#### 4"]),
        json.dumps({"question": "Q?", "answer": "Twelve hundred.\n#### 1,200"}),
    ]
    source = tmp_path / "mixed.jsonl"
    source.write_text("\n".join(lines) + "\n")
    assert main(["--input", str(source), "--output-dir", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "train: skipping line 2: not valid JSON (Expecting property name enclosed in double quotes)",
        "train: skipping line 4: 'question' must be a non-empty string, got None",
        "train: skipping line 5: 'answer' has no final '#### <number>' line",
        "train: skipping line 6: 'answer' ends with '#### four', which is not a number",
        "train: skipping line 7: expected an object with 'question' and 'answer', got list",
    ]
    rows = read_file(tmp_path / "out" / "train.parquet")
    assert [row["reward_spec"]["ground_truth"] for row in rows] == ["27", "1200"]
    # the source position: records 0..6 are the non-blank lines 1, 2, 4, 5, 6, 7, 8
    assert [row["extra_info"]["index"] for row in rows] == [0, 6]


def test_strict_writes_nothing_when_a_row_is_bad(tmp_path, capsys):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps(sample_records()[0]) + "\n" + json.dumps({"question": "Q?", "answer": "4"}) + "\n")
    assert main(["--input", str(source), "--output-dir", str(tmp_path / "out"), "--strict"]) == 1
    assert "1 bad row(s) and --strict given; nothing written" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_parquet_input_gives_the_same_rows_and_numbers_bad_rows(tmp_path, capsys):
    records = sample_records()[:3] + [{"question": "Q?", "answer": "no marker"}]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "gsm8k.parquet")
    assert main(["--input", str(tmp_path / "gsm8k.parquet"), "--output-dir", str(tmp_path / "pq")]) == 0
    assert "train: skipping row 3: 'answer' has no final '#### <number>' line" in capsys.readouterr().err
    from_jsonl, _ = convert_records(list(read_jsonl_records(SAMPLE_FILE))[:3], "train")
    assert read_file(tmp_path / "pq" / "train.parquet") == from_jsonl


def test_final_answer_normalizes_the_number():
    assert final_answer("...\n#### 1,234") == "1234"
    assert final_answer("a #### 1 then\n#### 72") == "72"
    assert final_answer("#### 0.50") == "0.5"
    with pytest.raises(ValueError, match="'answer' must be a string, got int"):
        final_answer(72)


def test_missing_or_unsupported_input_is_a_clear_error(tmp_path, capsys):
    assert main(["--input", str(tmp_path / "absent.jsonl"), "--output-dir", str(tmp_path)]) == 2
    assert "absent.jsonl: no such file" in capsys.readouterr().err
    (tmp_path / "gsm8k.csv").write_text("question,answer\n")
    assert main(["--input", str(tmp_path / "gsm8k.csv"), "--output-dir", str(tmp_path)]) == 2
    assert "expected a .jsonl or .parquet file" in capsys.readouterr().err


def test_hf_cache_without_the_datasets_package_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # restored afterwards: the script sets it for the process
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert main(["--from-hf-cache", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--from-hf-cache needs the `datasets` package, which is not installed" in err
    assert "never downloads" in err


def test_hf_cache_miss_says_so_and_reading_is_offline(tmp_path, monkeypatch, capsys):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split, {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE")}))
        raise ConnectionError("Couldn't reach the Hugging Face Hub (offline mode is enabled)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    assert main(["--from-hf-cache", "--output-dir", str(tmp_path), "--split", "test"]) == 2
    assert calls == [("openai/gsm8k", "main", "test", {"HF_HUB_OFFLINE": "1"})]
    err = capsys.readouterr().err
    assert "GSM8K ('openai/gsm8k', config 'main', split 'test') is not in the Hugging Face datasets cache" in err


def test_hf_cache_hit_converts_both_splits(tmp_path, monkeypatch):
    records = sample_records()
    splits = {"train": records[:15], "test": records[15:]}
    fake = types.SimpleNamespace(load_dataset=lambda name, config, split: splits[split])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert main(["--from-hf-cache", "--output-dir", str(tmp_path)]) == 0
    assert len(read_file(tmp_path / "train.parquet")) == 15
    test_rows = read_file(tmp_path / "test.parquet")
    assert [row["extra_info"]["split"] for row in test_rows] == ["test"] * 5
    assert test_rows[0]["reward_spec"]["ground_truth"] == "-6"


def test_command_line(tmp_path):
    script = SAMPLE_FILE.parent / "gsm8k_dataset.py"
    done = subprocess.run(
        [sys.executable, str(script), "--input", str(SAMPLE_FILE), "--output-dir", str(tmp_path), "--split", "train"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert len(read_file(tmp_path / "train.parquet")) == 20
