"""The file and service tracking backends `jsonl`, `wandb`, `tensorboard` and `mlflow` (imported only when used).

`jsonl` needs nothing: one JSON object per logged step in `log_dir/jsonl/<project>/<run_name>.jsonl`.

All three can run without a network: wandb with `WANDB_MODE=offline` (files under `WANDB_DIR` or `log_dir`),
TensorBoard event files under `log_dir/tensorboard/<project>/<run_name>`, and MLflow's file store under
`log_dir/mlruns` (or `MLFLOW_TRACKING_URI` when set).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyrl_train.utils.plain_values import flatten, to_jsonable
from skyrl_train.utils.tracking import (
    TrackingBackend,
    TrackingBackendError,
    register_tracking_backend,
    require_package,
)


@register_tracking_backend("jsonl")
class JsonlBackend(TrackingBackend):
    """Metrics as JSON lines, `{"step": N, "<metric>": value, ...}`, one per `log` call, flushed at once (so a
    crashed or running job can be read); the config goes to `<run_name>.config.json` next to it."""

    def start(self) -> None:
        """Create `log_dir/jsonl/<project>/`, write the config file and open the metrics file for appending."""
        run_dir = Path(self.log_dir) / "jsonl" / self.project
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / f"{self.run_name}.jsonl"
        if self.config:
            config_file = run_dir / f"{self.run_name}.config.json"
            config_file.write_text(json.dumps(to_jsonable(self.config, "config"), indent=1))
        self.handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole run)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Append one line for `step`."""
        self.handle.write(json.dumps({"step": step, **{name: float(value) for name, value in metrics.items()}}) + "\n")
        self.handle.flush()

    def finish(self) -> None:
        """Close the file."""
        self.handle.close()


@register_tracking_backend("wandb")
class WandbBackend(TrackingBackend):
    """Weights & Biases run; extra options are passed to `wandb.init` (e.g. `tags`, `entity`, `mode`).

    Needs a login (`wandb login` or `WANDB_API_KEY`) unless `WANDB_MODE=offline` (sync later with `wandb sync`).
    Files go to `WANDB_DIR` when set, else to `log_dir`.
    """

    def start(self, **init_options: Any) -> None:
        """Start the wandb run; `init_options` go to `wandb.init`."""
        wandb = require_package("wandb", "wandb")
        run_dir = os.environ.get("WANDB_DIR") or self.log_dir
        os.makedirs(run_dir, exist_ok=True)
        try:
            self.run = wandb.init(
                project=self.project,
                name=self.run_name,
                config=to_jsonable(self.config or {}, "config"),
                dir=run_dir,
                **init_options,
            )
        except (wandb.errors.UsageError, wandb.errors.AuthenticationError, wandb.errors.CommError) as error:
            raise TrackingBackendError(
                f"tracking backend 'wandb' could not start a run: {error}. Log in with `wandb login` or set "
                "WANDB_API_KEY, or run without a network with WANDB_MODE=offline"
            ) from error

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log `metrics` at `step` (wandb drops steps lower than one already logged)."""
        self.run.log(dict(metrics), step=step)

    def finish(self) -> None:
        """Finish the run (offline runs are then complete on disk)."""
        self.run.finish()


@register_tracking_backend("tensorboard")
class TensorboardBackend(TrackingBackend):
    """TensorBoard event files in `log_dir/tensorboard/<project>/<run_name>` (view with `tensorboard --logdir`)."""

    def start(self, flush_secs: int = 30) -> None:
        """Open the event file (written out every `flush_secs` seconds) and add the config as a text table."""
        require_package("tensorboard", "tensorboard")
        summary = require_package("torch.utils.tensorboard", "tensorboard")
        self.run_dir = os.path.join(self.log_dir, "tensorboard", self.project, self.run_name)
        self.writer = summary.SummaryWriter(log_dir=self.run_dir, flush_secs=flush_secs)
        if self.config:
            rows = "\n".join(f"| {key} | {value} |" for key, value in flatten(self.config).items())
            self.writer.add_text("config", "| key | value |\n|---|---|\n" + rows, global_step=0)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Add one scalar per metric at `step`."""
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=step)

    def finish(self) -> None:
        """Flush and close the event file."""
        self.writer.flush()
        self.writer.close()


_MLFLOW_BAD_NAME_CHARS = re.compile(r"[^\w\-. :/]")


@register_tracking_backend("mlflow")
class MlflowBackend(TrackingBackend):
    """MLflow run in experiment `project`, via `MlflowClient` (no global active run).

    The store is `MLFLOW_TRACKING_URI` when set, else a file store at `log_dir/mlruns`; for a file store
    `MLFLOW_ALLOW_FILE_STORE=true` is set (MLflow 3 refuses file stores otherwise). The config is logged as flat
    params and as the artifact `config.json`. Needs only `mlflow-skinny`.
    """

    def start(self, tracking_uri: str | None = None) -> None:
        """Create (or reuse) the experiment `project`, start the run and log the config."""
        require_package("mlflow", "mlflow")
        tracking = require_package("mlflow.tracking", "mlflow")
        entities = require_package("mlflow.entities", "mlflow")
        validation = require_package("mlflow.utils.validation", "mlflow")
        self._metric_cls = entities.Metric
        self._max_metrics = getattr(validation, "MAX_METRICS_PER_BATCH", 1000)
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or Path(self.log_dir, "mlruns").absolute().as_uri()
        if "://" not in uri or uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.tracking_uri = uri
        self.client = tracking.MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(self.project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(self.project)
        self.run_id = self.client.create_run(experiment_id, run_name=self.run_name).info.run_id
        if self.config:
            self._log_config(self.config, entities.Param, validation)

    def _log_config(self, config: Mapping[str, Any], param_cls: type, validation: Any) -> None:
        max_value = getattr(validation, "MAX_PARAM_VAL_LENGTH", 500)
        max_key = getattr(validation, "MAX_ENTITY_KEY_LENGTH", 250)
        per_batch = getattr(validation, "MAX_PARAMS_TAGS_PER_BATCH", 100)
        params = [
            param_cls(self._clean(key)[:max_key], str(value)[:max_value]) for key, value in flatten(config).items()
        ]
        for start in range(0, len(params), per_batch):
            self.client.log_batch(self.run_id, params=params[start : start + per_batch])
        self.client.log_dict(self.run_id, to_jsonable(config, "config"), "config.json")

    @staticmethod
    def _clean(name: str) -> str:
        """MLflow accepts letters, digits, `_ - . : /` and spaces in names; anything else becomes `_`."""
        return _MLFLOW_BAD_NAME_CHARS.sub("_", name)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log `metrics` at `step` in batches of MLflow's maximum size."""
        now_ms = int(time.time() * 1000)
        batch = [self._metric_cls(self._clean(name), value, now_ms, step) for name, value in metrics.items()]
        for start in range(0, len(batch), self._max_metrics):
            self.client.log_batch(self.run_id, metrics=batch[start : start + self._max_metrics])

    def finish(self) -> None:
        """Mark the run finished."""
        self.client.set_terminated(self.run_id, "FINISHED")
