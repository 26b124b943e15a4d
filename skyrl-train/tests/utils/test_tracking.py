"""Tracker fan-out, the backend registry, the console backend's output and the learning-curve PNG."""

import io
import logging
import struct
import sys

import numpy as np
import pytest
import torch

from skyrl_train.utils.tracking import (
    TRACKING_BACKENDS,
    Tracker,
    TrackingBackend,
    TrackingBackendError,
    plot_curves,
    register_tracking_backend,
)


class RecordingBackend(TrackingBackend):
    """Keeps what it receives, to check the Tracker's fan-out."""

    instances: list["RecordingBackend"] = []

    def __init__(self, project, run_name, config, log_dir, fail_on_finish=False):
        super().__init__(project, run_name, config, log_dir)
        self.logged = []
        self.finished = 0
        self.fail_on_finish = fail_on_finish
        RecordingBackend.instances.append(self)

    def log(self, metrics, step):
        self.logged.append((step, dict(metrics)))

    def finish(self):
        self.finished += 1
        if self.fail_on_finish:
            raise RuntimeError("finish failed")


@pytest.fixture
def recording_backends():
    RecordingBackend.instances = []
    register_tracking_backend("recording")(RecordingBackend)
    register_tracking_backend("recording2")(RecordingBackend)
    yield RecordingBackend.instances
    TRACKING_BACKENDS.pop("recording")
    TRACKING_BACKENDS.pop("recording2")


def test_tracker_sends_scalars_and_keeps_history(recording_backends, tmp_path, caplog):
    tracker = Tracker(["recording"], "proj", "run", {"lr": 1e-6}, str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="skyrl_train.utils.tracking"):
        tracker.log({"reward/mean": torch.tensor(0.5), "n": np.int64(3), "text": "hi", "vec": [1, 2]}, step=1)
        tracker.log({"reward/mean": 0.75, "text": "again"}, step=2)
        tracker.log({"text": "only text"}, step=3)  # nothing numeric: backends are not called
    tracker.finish()
    tracker.finish()

    (backend,) = recording_backends
    assert (backend.project, backend.run_name, backend.config) == ("proj", "run", {"lr": 1e-6})
    assert backend.logged == [(1, {"reward/mean": 0.5, "n": 3.0}), (2, {"reward/mean": 0.75})]
    assert tracker.history == {"reward/mean": [(1, 0.5), (2, 0.75)], "n": [(1, 3.0)]}
    assert backend.finished == 1
    assert caplog.text.count("'text' is a str, not a number") == 1
    assert "'vec' is a list" in caplog.text


def test_tracker_rejects_unknown_backends_and_stray_options(tmp_path):
    with pytest.raises(ValueError, match=r"unknown tracking backend\(s\) \['nope'\]; known: \[.*'console'.*\]"):
        Tracker(["console", "nope"], "p", "r", log_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"backend_options given for \['wandb'\]"):
        Tracker(["console"], "p", "r", log_dir=str(tmp_path), backend_options={"wandb": {}})
    with pytest.raises(TypeError, match="must be a TrackingBackend subclass"):
        register_tracking_backend("bad")(dict)


def test_finish_closes_every_backend_then_raises_first_error(recording_backends, tmp_path):
    tracker = Tracker(
        ["recording", "recording2"],
        "p",
        "r",
        log_dir=str(tmp_path),
        backend_options={"recording": {"fail_on_finish": True}},
    )
    with pytest.raises(RuntimeError, match="finish failed"):
        tracker.finish()
    assert [b.finished for b in recording_backends] == [1, 1]


def test_missing_optional_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` raise ImportError
    with pytest.raises(
        TrackingBackendError, match=r"needs the 'wandb' package .*pip install -e './skyrl-train\[wandb\]'"
    ):
        Tracker(["wandb"], "p", "r", log_dir=str(tmp_path))


def run_console(tmp_path, **options):
    stream = io.StringIO()
    options = {"total_steps": 3, "stream": stream, **options}
    with Tracker("console", "p", "demo", log_dir=str(tmp_path), backend_options={"console": options}) as tracker:
        tracker.log({"reward/mean": 0.25, "timing/step": 1.5, "zzz/other": 7.0}, step=1)
        tracker.log({"eval/arithmetic/pass_at_1": 0.5, "eval/gsm8k/pass_at_1": 0.125, "reward/mean": -0.0}, step=2)
        tracker.log({"reward/mean": 1 / 3}, step=3)
    return stream.getvalue()


def test_console_summary_lines_for_a_ci_log(tmp_path):
    output = run_console(tmp_path)
    lines = output.splitlines()
    assert "\r" not in output  # a non-terminal stream gets whole lines only
    summaries = [line for line in lines if line.startswith("step ")]
    assert summaries == [
        "step 1/3 | reward/mean 0.25 | timing/step 1.5",
        "step 2/3 | reward/mean 0 | eval/arithmetic/pass_at_1 0.5 | eval/gsm8k/pass_at_1 0.125",
        "step 3/3 | reward/mean 0.3333",
    ]
    bars = [line for line in lines if line.startswith("demo:")]
    # Drawn at start and at close only: the 30 s mininterval for logs suppresses the per-step redraws.
    assert len(bars) == 2
    assert bars[0].startswith("demo:   0%") and "0/3" in bars[0]
    assert "3/3" in bars[1] and "reward/mean=0.3333" in bars[1]


def test_console_keys_are_selectable_and_bar_can_be_off(tmp_path):
    output = run_console(tmp_path, keys=["zzz/*", "eval/gsm8k/*"], progress_bar=False)
    assert output.splitlines() == [
        "step 1/3 | zzz/other 7",
        "step 2/3 | eval/gsm8k/pass_at_1 0.125",
        "step 3/3",
    ]
    with pytest.raises(TypeError, match="keys must be a list of metric name patterns"):
        run_console(tmp_path, keys="reward/mean")


def png_size(path):
    """(width, height) from the IHDR chunk, after checking the 8-byte PNG signature."""
    with open(path, "rb") as handle:
        header = handle.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def test_plot_curves_writes_a_png(tmp_path):
    history = {
        "reward/mean": [(1, 0.2), (2, 0.4), (3, 0.5)],
        "eval/arithmetic/pass_at_1": [(0, 0.1), (3, 0.6)],
        "timing/step": [(1, 9.0)],
    }
    path = plot_curves(history, str(tmp_path / "plots" / "curves.png"), title="test run")
    assert path == str(tmp_path / "plots" / "curves.png")
    assert png_size(path) == (1100, 420)  # figsize 11 x 4.2 inches at 100 dpi
    empty = plot_curves({}, str(tmp_path / "empty.png"))
    assert png_size(empty) == (1100, 420)
    assert (tmp_path / "plots" / "curves.png").stat().st_size > (tmp_path / "empty.png").stat().st_size
