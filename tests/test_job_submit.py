"""`ray job submit` of the quickstart and of the custom-env example (a `BasePPOExp` run with the user's env module)
to a Ray cluster started with `ray start --head` and `ray start --address` (two raylets on this machine). Each job
ships its example's folder as the working directory, and its driver trains on the cluster it joins instead of
starting its own Ray."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyrl_train.serving.listen import spare_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RAY = str(Path(sys.executable).with_name("ray"))


def _free_ports(count: int) -> list[int]:
    """Distinct free ports outside the OS's bind(0) range: the head's own daemons draw from that range before the
    second node binds its agent's port."""
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(spare_port())
    return list(ports)


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


@pytest.fixture(scope="module")
def cluster():
    """A head node (4 CPUs, dashboard for job submission) and a second node (2 CPUs) on this machine."""
    if shutil.which(RAY) is None and not Path(RAY).exists():
        pytest.fail(f"the ray CLI is not next to {sys.executable}")
    pytest.importorskip("aiohttp", reason="job submission needs ray[default]: pip install -e './skyrl-train[cluster]'")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"  # a local test cluster; token auth would need a token on every node
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `python` = this venv's, as
    # for a user who activated the environment before `ray start`
    # a node's dashboard agent listens on a fixed port (52365) unless told otherwise: the test session's own Ray and
    # this cluster's second node would take it, and a node whose agent cannot bind takes no jobs
    gcs, dashboard, head_agent, worker_agent = _free_ports(4)
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
                    f"--dashboard-agent-listen-port={head_agent}",
                    "--num-cpus=4",
                    f"--temp-dir={temp}",
                    "--disable-usage-stats",
                ],
                env,
            )
        )
        worker = [f"--address=127.0.0.1:{gcs}", f"--dashboard-agent-listen-port={worker_agent}", "--num-cpus=2"]
        groups.append(_start([*worker, "--disable-usage-stats"], env))
        yield {"dashboard": f"http://127.0.0.1:{dashboard}", "env": env}
    finally:
        for group in reversed(groups):
            _stop(group)
        shutil.rmtree(temp, ignore_errors=True)


def _submit(cluster: dict, example: str, *command: str) -> str:
    """`ray job submit` of `command` with `examples/<example>` as the working directory; returns the job's log."""
    for _ in range(10):  # a fresh head's job agent registers a few seconds after `ray start` returns
        submitted = _run_submit(cluster, example, command)
        if submitted.returncode == 0 or "No available agent to submit job" not in submitted.stdout + submitted.stderr:
            break
        time.sleep(2)
    log = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, log[-4000:]
    assert "succeeded" in log.lower(), log[-4000:]
    return log


def _run_submit(cluster: dict, example: str, command: tuple) -> subprocess.CompletedProcess:
    runtime_env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}}
    return subprocess.run(
        [
            RAY,
            "job",
            "submit",
            f"--address={cluster['dashboard']}",
            f"--working-dir={EXAMPLES / example}",
            f"--runtime-env-json={json.dumps(runtime_env)}",
            "--",
            *command,
        ],
        env=cluster["env"],
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_custom_env_example_trains_as_a_job_with_its_env_module(cluster, tmp_path):
    out = tmp_path / "out"
    overrides = [
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "generator.n_samples_per_prompt=4",
        "trainer.micro_train_batch_size_per_gpu=4",
        "trainer.micro_forward_batch_size_per_gpu=8",
        "trainer.max_training_steps=1",
        "trainer.eval_before_train=false",
    ]
    command = ["python", "train_custom_env.py", f"--out={out}", "--train-size=16", "--test-size=8", *overrides]
    log = _submit(cluster, "custom_env", *command)
    assert "steps: 1 in" in log, log[-4000:]  # the example's own report, printed by the job's driver
    assert (out / "exports").is_dir()


def test_the_quickstart_trains_as_a_job(cluster, tmp_path):
    out = tmp_path / "qs"
    command = ["python", "run_quickstart.py", f"--out={out}", "--train-size=64", "--test-size=8"]
    log = _submit(cluster, "quickstart", *command, "trainer.max_training_steps=1", "trainer.eval_interval=0")
    assert "quickstart: eval accuracy before=" in log, log[-4000:]
    assert (out / "ckpts" / "global_step_1" / "COMPLETE").exists()
