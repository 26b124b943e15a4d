"""The wandb (offline), tensorboard and mlflow (file store) backends write real files that read back the metrics."""

import glob
import json
import os
import struct
import subprocess
import sys
import time

import pytest

from skyrl_train.utils.tracking import Tracker

CONFIG = {"trainer": {"lr": 1e-6, "tags": ["a", "b"]}, "seed": 42}
METRICS = [
    (1, {"reward/mean": 0.25, "eval/arithmetic/pass_at_1": 0.5}),
    (2, {"reward/mean": 0.5}),
    (3, {"reward/mean": 0.75, "eval/arithmetic/pass_at_1": 1.0}),
]


def log_run(backend, log_dir, **options):
    with Tracker([backend], "proj", "run1", CONFIG, str(log_dir), backend_options={backend: options}) as tracker:
        for step, metrics in METRICS:
            tracker.log(metrics, step)
    return tracker


def read_wandb_records(path):
    """Parse a `.wandb` run file: a 7-byte file header, then 32 KiB blocks of records, each with a 7-byte header
    (crc32, little-endian length, type 1=full 2=first 3=middle 4=last) and a serialized protobuf `Record`."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as handle:
        data = handle.read()
    block, position, pending, records = 32768, 7, b"", []
    while position + 7 <= len(data):
        if block - position % block < 7:  # block trailer too short for a header: skip to the next block
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if length == 0 and kind == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


@pytest.mark.integration  # wandb starts its wandb-core service process
def test_wandb_offline_run_files(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from google.protobuf.message import DecodeError

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    log_run("wandb", tmp_path / "logs")

    (run_file,) = glob.glob(str(tmp_path / "wandb_dir" / "wandb" / "offline-run-*" / "run-*.wandb"))
    expected = [{"step": step, **metrics} for step, metrics in METRICS]
    # wandb-core writes the file from its own process: on a loaded machine (one CI run) the history records were not
    # on disk yet when the test first read it, so re-read for a while; data that never arrives still fails below.
    deadline = time.monotonic() + 30
    while True:
        try:
            records = read_wandb_records(run_file)
        except DecodeError:  # a record half written
            records = []
        history = []
        for record in records:
            if record.WhichOneof("record_type") == "history":
                # Keys holding "/" may be stored split into `nested_key`; "_step", "_runtime"... are wandb's own.
                items = {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
                }
                history.append({"step": record.history.step.num} | {k: v for k, v in items.items() if k[0] != "_"})
        if history == expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert history == expected
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name) == ("proj", "run1")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert {key: value for key, value in config.items() if key != "_wandb"} == CONFIG
    assert not os.path.exists(tmp_path / "logs" / "wandb")  # WANDB_DIR wins over log_dir


NO_LOGIN_SCRIPT = """
import sys
from skyrl_train.utils.tracking import Tracker, TrackingBackendError
try:
    Tracker(["wandb"], "proj", "run1", {}, sys.argv[1])
except TrackingBackendError as error:
    print("ERROR:", error)
"""


@pytest.mark.integration  # a fresh process: wandb keeps its settings (e.g. offline mode) for the process lifetime
def test_wandb_without_login_or_offline_fails_clearly(tmp_path):
    pytest.importorskip("wandb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"HOME": str(tmp_path), "WANDB_CONFIG_DIR": str(tmp_path / "config"), "WANDB_DIR": str(tmp_path)}
    env["WANDB_SILENT"] = "true"
    result = subprocess.run(
        [sys.executable, "-c", NO_LOGIN_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR: tracking backend 'wandb' could not start a run: No API key configured" in result.stdout
    assert "WANDB_MODE=offline" in result.stdout


def test_tensorboard_event_file_reads_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_run("tensorboard", tmp_path)

    run_dir = tmp_path / "tensorboard" / "proj" / "run1"
    assert glob.glob(str(run_dir / "events.out.tfevents.*"))
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["eval/arithmetic/pass_at_1", "reward/mean"]
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert [(e.step, e.value) for e in events.Scalars("eval/arithmetic/pass_at_1")] == [(1, 0.5), (3, 1.0)]


def test_mlflow_file_store_reads_back(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.setenv(name, "")  # recorded, so the test restores the original state afterwards
        monkeypatch.delenv(name)
    tracker = log_run("mlflow", tmp_path)
    assert os.environ["MLFLOW_ALLOW_FILE_STORE"] == "true"

    backend = tracker.backends["mlflow"]
    assert backend.tracking_uri == (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=backend.tracking_uri)
    run = client.get_run(backend.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run1"
    assert client.get_experiment(run.info.experiment_id).name == "proj"
    assert run.data.params == {"trainer.lr": "1e-06", "trainer.tags": "['a', 'b']", "seed": "42"}
    history = client.get_metric_history(backend.run_id, "reward/mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    config_file = tmp_path / "mlruns" / run.info.experiment_id / backend.run_id / "artifacts" / "config.json"
    assert json.loads(config_file.read_text()) == CONFIG

    # A second run of the same project joins the existing experiment.
    second = log_run("mlflow", tmp_path).backends["mlflow"]
    assert client.get_run(second.run_id).info.experiment_id == run.info.experiment_id


def test_jsonl_lines_read_back_and_config_is_saved(tmp_path):
    import json

    tracker = log_run("jsonl", tmp_path)
    run_file = tmp_path / "jsonl" / "proj" / "run1.jsonl"
    lines = [json.loads(line) for line in run_file.read_text().splitlines()]
    assert [line["step"] for line in lines] == [step for step, _ in METRICS]
    for line, (_, metrics) in zip(lines, METRICS):
        assert {k: v for k, v in line.items() if k != "step"} == pytest.approx(dict(metrics))
    assert json.loads((tmp_path / "jsonl" / "proj" / "run1.config.json").read_text()) == json.loads(json.dumps(CONFIG))
    assert tracker is not None
