"""`ray job submit` of this example to a Ray cluster started with `ray start --head` and `ray start --address`
(two raylets on this machine), the example's folder shipped as the job's working directory: the user's env module
travels with the job, and the run trains on the cluster it joins instead of starting its own Ray."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
RAY = str(Path(sys.executable).with_name("ray"))
TINY = [
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "generator.n_samples_per_prompt=4",
    "trainer.micro_train_batch_size_per_gpu=4",
    "trainer.micro_forward_batch_size_per_gpu=8",
    "trainer.max_training_steps=1",
    "trainer.eval_before_train=false",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(args: list[str], env: dict) -> int:
    """Run `ray start ...` in a new process group (its daemons inherit it); returns the group id."""
    process = subprocess.Popen(
        [RAY, "start", *args],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = process.communicate(timeout=180)
    assert process.returncode == 0, output[-3000:]
    return process.pid


def _stop(group: int) -> None:
    """This cluster's processes only (`ray stop` would also stop the test session's own Ray)."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        time.sleep(wait)


@pytest.fixture
def cluster(tmp_path):
    """A head node (4 CPUs, dashboard for job submission) and a second node (2 CPUs) on this machine."""
    if shutil.which(RAY) is None and not Path(RAY).exists():
        pytest.fail(f"the ray CLI is not next to {sys.executable}")
    pytest.importorskip("aiohttp", reason="job submission needs ray[default]: pip install 'skyrl-train[cluster]'")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"  # a local test cluster; token auth would need a token on every node
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `python` = this venv's, as
    # for a user who activated the environment before `ray start`
    gcs, dashboard = _free_port(), _free_port()
    temp = Path("/tmp") / f"skyrl-jobs-{os.getpid()}"  # short: Ray's socket paths must stay under 107 characters
    groups = []
    try:
        groups.append(
            _start(
                [
                    "--head",
                    f"--port={gcs}",
                    f"--dashboard-port={dashboard}",
                    "--include-dashboard=true",
                    "--num-cpus=4",
                    f"--temp-dir={temp}",
                    "--disable-usage-stats",
                ],
                env,
            )
        )
        groups.append(_start([f"--address=127.0.0.1:{gcs}", "--num-cpus=2", "--disable-usage-stats"], env))
        yield {"dashboard": f"http://127.0.0.1:{dashboard}", "env": env}
    finally:
        for group in reversed(groups):
            _stop(group)
        shutil.rmtree(temp, ignore_errors=True)


def test_the_example_submitted_as_a_job_trains_on_the_cluster_with_its_env_module(cluster, tmp_path):
    out = tmp_path / "out"
    runtime_env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}}
    submitted = subprocess.run(
        [
            RAY,
            "job",
            "submit",
            f"--address={cluster['dashboard']}",
            f"--working-dir={HERE}",
            f"--runtime-env-json={json.dumps(runtime_env)}",
            "--",
            "python",
            "train_custom_env.py",
            f"--out={out}",
            "--train-size=16",
            "--test-size=8",
            *TINY,
        ],
        env=cluster["env"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, log[-4000:]
    assert "succeeded" in log.lower(), log[-4000:]
    assert "steps: 1 in" in log, log[-4000:]  # the example's own report, printed by the job's driver
    # the job joined the running cluster: its driver started no Ray of its own
    assert "Connecting to existing Ray cluster" in log or "Started a local Ray instance" not in log, log[-4000:]
    assert (out / "exports").is_dir()
