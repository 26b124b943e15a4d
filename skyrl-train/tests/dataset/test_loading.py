"""Reading dataset files: formats by extension, fsspec URLs, and plain Python values whatever the format."""

import json

import fsspec
import numpy as np
import pytest

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.dataset.loading import READERS, DatasetFileError, load_files, read_file, register_reader, to_python


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """The same arithmetic rows written once as parquet and once as jsonl."""
    root = tmp_path_factory.mktemp("synthetic")
    options = dict(train_size=12, test_size=4, difficulty=1, seed=3)
    return {
        "parquet": write_dataset(root / "pq", "arithmetic", fmt="parquet", **options),
        "jsonl": write_dataset(root / "jl", "arithmetic", fmt="jsonl", **options),
    }


def _types(value):
    """The structure of a value with every leaf replaced by its exact type."""
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value)


def test_parquet_and_jsonl_give_identical_rows_of_python_types(synthetic):
    from_parquet = read_file(synthetic["parquet"]["train"])
    from_jsonl = read_file(str(synthetic["jsonl"]["train"]))
    assert len(from_parquet) == 12
    assert from_parquet == from_jsonl
    assert _types(from_parquet) == _types(from_jsonl)
    assert type(from_parquet[0]["extra_info"]["difficulty"]) is int
    assert type(from_parquet[0]["prompt"]) is list


def test_files_are_concatenated_in_the_given_order(synthetic):
    loaded = load_files([synthetic["jsonl"]["test"], synthetic["parquet"]["train"]])
    assert [entry.path for entry in loaded] == [str(synthetic["jsonl"]["test"]), str(synthetic["parquet"]["train"])]
    assert [len(entry.rows) for entry in loaded] == [4, 12]
    assert loaded[0].rows[0]["extra_info"]["split"] == "test"
    assert loaded[1].rows[0]["extra_info"]["split"] == "train"


def test_a_single_path_string_is_one_file(synthetic):
    assert len(load_files(str(synthetic["jsonl"]["test"]))) == 1


def test_json_list_and_json_lines_under_a_json_name(tmp_path, synthetic):
    rows = read_file(synthetic["jsonl"]["test"])
    as_list = tmp_path / "rows.json"
    as_list.write_text(json.dumps(rows))
    as_lines = tmp_path / "lines.json"
    as_lines.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    assert read_file(as_list) == rows
    assert read_file(as_lines) == rows


def test_file_url(synthetic):
    url = synthetic["parquet"]["test"].resolve().as_uri()
    assert url.startswith("file://")
    assert read_file(url) == read_file(synthetic["parquet"]["test"])


def test_memory_filesystem_url(synthetic):
    memory = fsspec.filesystem("memory")
    try:
        for fmt in ("parquet", "jsonl"):
            memory.pipe(f"/skyrl-test/train.{fmt}", synthetic[fmt]["train"].read_bytes())
        loaded = load_files(["memory://skyrl-test/train.parquet", "memory://skyrl-test/train.jsonl"])
    finally:
        memory.rm("/skyrl-test", recursive=True)
    assert loaded[0].rows == loaded[1].rows == read_file(synthetic["jsonl"]["train"])


def test_unsupported_extension_is_named_with_the_supported_ones(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("a,b\n")
    with pytest.raises(DatasetFileError, match=r"rows\.csv: unsupported file extension '\.csv'; expected one of"):
        read_file(path)
    with pytest.raises(DatasetFileError, match=r"unsupported file extension '\(none\)'; expected one of \['\.json'"):
        read_file(tmp_path / "rows")


def test_bad_json_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2,\n')
    with pytest.raises(DatasetFileError, match=r"bad\.jsonl, line 3: not valid JSON"):
        read_file(path)


def test_json_must_hold_rows(tmp_path):
    path = tmp_path / "number.json"
    path.write_text("42")
    with pytest.raises(DatasetFileError, match="expected a JSON list of row objects, got a int"):
        read_file(path)


def test_corrupt_parquet_and_missing_file(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(DatasetFileError, match=r"broken\.parquet: not a readable parquet file"):
        read_file(path)
    with pytest.raises(FileNotFoundError, match="dataset file not found: .*absent.jsonl"):
        read_file(tmp_path / "absent.jsonl")


def test_no_files_is_an_error():
    with pytest.raises(DatasetFileError, match="no dataset files given"):
        load_files([])


def test_to_python_converts_numpy_values_recursively():
    value = {
        "prompt": np.array([{"role": "user", "content": "hi"}], dtype=object),
        "extra_info": {"index": np.int64(3), "scores": np.array([1.5, 2.0]), "ok": np.bool_(True)},
        "pair": (np.float32(0.5), "x"),
        "grid": np.array([[1, 2], [3, 4]], dtype=np.int32),
    }
    converted = to_python(value)
    assert converted == {
        "prompt": [{"role": "user", "content": "hi"}],
        "extra_info": {"index": 3, "scores": [1.5, 2.0], "ok": True},
        "pair": [0.5, "x"],
        "grid": [[1, 2], [3, 4]],
    }
    assert _types(converted) == {
        "prompt": [{"role": str, "content": str}],
        "extra_info": {"index": int, "scores": [float, float], "ok": bool},
        "pair": [float, str],
        "grid": [[int, int], [int, int]],
    }


def test_rows_of_a_registered_reader_are_converted_to_python(tmp_path):
    """A reader returning numpy values (as a pandas-based one would) still hands Python values to envs."""

    @register_reader(".npyrows")
    def read_numpy_rows(handle, source):
        ids = np.frombuffer(handle.read(), dtype=np.int64)
        return [{"id": ids[0], "ids": ids}]

    path = tmp_path / "rows.npyrows"
    path.write_bytes(np.array([7, 8], dtype=np.int64).tobytes())
    try:
        rows = read_file(path)
    finally:
        del READERS[".npyrows"]
    assert rows == [{"id": 7, "ids": [7, 8]}]
    assert type(rows[0]["id"]) is int and type(rows[0]["ids"][1]) is int


def test_register_reader_wants_a_dotted_extension():
    with pytest.raises(ValueError, match="extension must start with a dot"):
        register_reader("csv")
